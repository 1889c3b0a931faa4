package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// The console's session key follows the admin token: the same for the
// same token (every replica), another for another token, none without one.
func TestConsoleSessionKey(t *testing.T) {
	b := setup(t)
	with := func(token string) *Server {
		return testServer(t, b.store, b.clock, nil, Config{AdminToken: token})
	}
	k := b.server.ConsoleSessionKey()
	require.Len(t, k, 32)
	require.Equal(t, k, with(testAdmin).ConsoleSessionKey(), "every replica with the token has the key")
	require.NotEqual(t, k, with(testAdmin+"x").ConsoleSessionKey(), "another token, another key")
	require.NotContains(t, string(k), testAdmin)
	require.Nil(t, with("").ConsoleSessionKey(), "no token: no key, no session")
}

// DELETE /api/console/sessions ends every console session; it takes the
// admin token.
func TestEndConsoleSessions(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	for i := range 3 {
		_, err := b.store.SessionCreate(ctx, &store.SessionCreateParams{
			IDHash: []byte(fmt.Sprintf("session-hash-%d", i)), Now: now, ExpiresAt: now.Add(time.Hour),
			IdleBefore: now.Add(-time.Hour), Max: 10,
		})
		require.NoError(t, err)
	}
	count := func() int {
		n, err := b.store.SessionCount(ctx)
		require.NoError(t, err)
		return n
	}

	a := b.do("DELETE", "/api/console/sessions", nil, nil)
	require.Equal(t, 401, a.status)
	a = b.do("DELETE", "/api/console/sessions", nil, map[string]string{"Authorization": "Bearer wrong-token"})
	require.Equal(t, 401, a.status)
	require.Equal(t, 3, count(), "refused: nothing ended")

	a = b.admin("DELETE", "/api/console/sessions", nil)
	require.Equal(t, 200, a.status, string(a.body))
	require.JSONEq(t, `{"ended":3}`, string(a.body))
	require.Zero(t, count())
	a = b.admin("DELETE", "/api/console/sessions", nil)
	require.Equal(t, 200, a.status)
	require.JSONEq(t, `{"ended":0}`, string(a.body))
}
