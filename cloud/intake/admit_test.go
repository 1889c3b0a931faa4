package intake

import (
	"fmt"
	"net/http"
	"testing"
	"time"

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

// Correlation ids sort by the time they were made (their index grows at
// one end) and are told apart within a millisecond by 64 random bits.
func TestCorrelationIDsSortByTime(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a, b := NewCorrelationID(at), NewCorrelationID(at)
	require.Regexp(t, `^[0-9a-f]{28}$`, a)
	require.NotEqual(t, a, b)
	require.Equal(t, a[:12], b[:12], "the same millisecond")
	require.Equal(t, fmt.Sprintf("%012x", at.UnixMilli()), a[:12])
	prev := a
	for i := 1; i <= 1000; i++ {
		next := NewCorrelationID(at.Add(time.Duration(i) * time.Millisecond))
		require.Less(t, prev, next)
		prev = next
	}
}
