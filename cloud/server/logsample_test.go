package server

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAccessLogBounded: failed requests anyone can send are logged at most
// accessLogPerMin a minute per route and status, whatever the flood; the
// next line after a quiet minute says how many went unlogged, and another
// route's failures have their own budget.
func TestAccessLogBounded(t *testing.T) {
	b := authSetup(t)
	// Unknown hosts (404 on the intake route) and unrouted paths (404, no route).
	for i := 0; i < 500; i++ {
		require.Equal(t, 404, b.from("203.0.113.9", "POST", "/api/webhooks/h_"+strings.Repeat("z", 24)+"/github", strings.NewReader("{}"), nil).status)
		require.Equal(t, 404, b.from("203.0.113.9", "GET", "/nothing/here", nil, nil).status)
	}
	log := b.log.String()
	require.Equal(t, accessLogPerMin, strings.Count(log, "route=/api/webhooks/:hostId/:source status=404"), log)
	require.Equal(t, accessLogPerMin, strings.Count(log, "route=\"\" status=404"))

	b.clock.Advance(time.Minute)
	b.log.Reset()
	b.from("203.0.113.9", "GET", "/nothing/here", nil, nil)
	require.Contains(t, b.log.String(), "unlogged_before=440")
}
