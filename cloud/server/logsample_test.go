package server

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// TestAccessLogBounded: failed requests anyone can send are logged at most
// accessLogPerMin a minute per route and status, whatever the flood; the
// next line after a quiet minute says how many went unlogged, and another
// route's failures have their own budget.
func TestAccessLogBounded(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	t.Cleanup(func() { st.Close() })
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	ring, err := secrets.NewRing(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	tokens, err := auth.NewTokens(jwtKey, 0, clock)
	require.NoError(t, err)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := &authBundle{t: t, handler: New(st, ring, tokens, clock, log, Config{AdminToken: testAdmin}).Handler(), clock: clock, log: &buf}

	// Unknown hosts (404 on the intake route) and unrouted paths (404, no route).
	for i := 0; i < 500; i++ {
		require.Equal(t, 404, b.from("203.0.113.9", "POST", "/api/webhooks/h_"+strings.Repeat("z", 24)+"/github", strings.NewReader("{}"), nil).status)
		require.Equal(t, 404, b.from("203.0.113.9", "GET", "/nothing/here", nil, nil).status)
	}
	intake := strings.Count(buf.String(), "route=/api/webhooks/:hostId/:source status=404")
	unrouted := strings.Count(buf.String(), "route=\"\" status=404")
	require.Equal(t, accessLogPerMin, intake, buf.String())
	require.Equal(t, accessLogPerMin, unrouted)

	clock.Advance(time.Minute)
	buf.Reset()
	b.from("203.0.113.9", "GET", "/nothing/here", nil, nil)
	require.Contains(t, buf.String(), "unlogged_before=440")
}
