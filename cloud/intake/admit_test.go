package intake

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/verify"
)

// The headers a request's Connection header names are hop-by-hop, and
// never kept, whatever the source's filter keeps.
func TestProviderHeadersDropWhatConnectionNames(t *testing.T) {
	// Several Connection headers, names in any case and spacing, under a
	// filter that keeps every header.
	gh, _ := verify.Lookup("github")
	got := providerHeaders(http.Header{
		"Connection": {"close", " X-A ,x-b"}, "X-A": {"1"}, "X-B": {"2"}, "X-C": {"3"}, "Expect": {"100-continue"},
	}, verify.ForwardedHeaders(gh, map[string]string{verify.ForwardOption: "*"}), nil)
	require.Equal(t, map[string]string{"x-c": "3"}, got)
}
