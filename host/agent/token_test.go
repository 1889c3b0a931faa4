package agent

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokenRefreshOn401(t *testing.T) {
	t.Parallel()
	b, hb := setupFailingFirst(t, http.StatusUnauthorized)
	require.Equal(t, "Bearer tok-1", hb.authorization)
	// Retried at once with a fresh token, without waiting on the clock.
	hb = b.next(t)
	require.Equal(t, http.StatusOK, hb.status)
	require.Equal(t, "Bearer tok-2", hb.authorization)
}

func TestTokenRenewedAt80PercentOfLifetime(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) { b.cloud.tokenLifetime = 50 * time.Second })
	require.Equal(t, "Bearer tok-1", b.next(t).authorization) // t=0, renew at 40 s
	require.Equal(t, "Bearer tok-1", b.next(t).authorization) // t=0, idle after reporting: the long poll
	require.Equal(t, "Bearer tok-1", b.next(t).authorization) // t=0, answered early: polled again at once
	b.advance(t, 30*time.Second)
	require.Equal(t, "Bearer tok-1", b.next(t).authorization) // t=30
	b.advance(t, 30*time.Second)
	require.Equal(t, "Bearer tok-2", b.next(t).authorization) // t=60
}

func TestRevokedHostStops(t *testing.T) {
	t.Parallel()
	// 410: deactivated; 401: the credential itself is rejected.
	for _, status := range []int{http.StatusGone, http.StatusUnauthorized} {
		b := setup(t, func(b *testBundle) { b.cloud.tokenStatus = status })
		select {
		case err := <-b.done:
			require.ErrorIs(t, err, ErrRevoked, "token endpoint answered %d", status)
			require.ErrorContains(t, err, "host deactivated")
			b.done <- err // for the cleanup
		case <-time.After(10 * time.Second):
			t.Fatal("agent did not stop")
		}
		require.Empty(t, b.cloud.requests, "no heartbeat without a token")
	}
}
