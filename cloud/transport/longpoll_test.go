package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The binary media type is taken in any case and with parameters, and
// only as itself.
func TestAcceptsBinary(t *testing.T) {
	require.True(t, acceptsBinary("application/json;q=0.9, APPLICATION/VND.RELAY.WEBHOOKS+BINARY ; q=1"))
	require.False(t, acceptsBinary("application/vnd.relay.webhooks+binaryx"))
}
