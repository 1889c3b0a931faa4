package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

func exerciseConsole(ctx context.Context, t *testing.T, setup setupFunc) {
	idHash := func(n int) []byte {
		sum := sha256.Sum256([]byte(fmt.Sprint("session-", n)))
		return sum[:]
	}
	create := func(t *testing.T, s store.Store, n int, now time.Time, max int) {
		t.Helper()
		_, err := s.SessionCreate(ctx, &store.SessionCreateParams{
			IDHash: idHash(n), Now: now, ExpiresAt: now.Add(7 * 24 * time.Hour), IdleBefore: now.Add(-12 * time.Hour), Max: max,
		})
		require.NoError(t, err)
	}
	exists := func(t *testing.T, s store.Store, n int) bool {
		t.Helper()
		_, err := s.SessionGet(ctx, idHash(n))
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	t.Run("SessionLifecycle", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		_, err := s.SessionGet(ctx, idHash(1))
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, s.SessionTouch(ctx, idHash(1), base), store.ErrNotFound)

		got, err := s.SessionCreate(ctx, &store.SessionCreateParams{
			IDHash: idHash(1), Now: base.Add(123456 * time.Microsecond), ExpiresAt: base.Add(7 * 24 * time.Hour),
			IdleBefore: base.Add(-12 * time.Hour), Max: 10,
		})
		require.NoError(t, err)
		want := &store.Session{IDHash: idHash(1), CreatedAt: base.Add(123 * time.Millisecond),
			LastSeenAt: base.Add(123 * time.Millisecond), ExpiresAt: base.Add(7 * 24 * time.Hour)}
		require.Equal(t, want, got, "times kept to the millisecond")
		read, err := s.SessionGet(ctx, idHash(1))
		require.NoError(t, err)
		require.Equal(t, want, read)

		_, err = s.SessionCreate(ctx, &store.SessionCreateParams{IDHash: idHash(1), Now: base, ExpiresAt: base.Add(time.Hour), IdleBefore: base.Add(-time.Hour), Max: 10})
		require.ErrorIs(t, err, store.ErrConflict, "an id is never reused")

		require.NoError(t, s.SessionTouch(ctx, idHash(1), base.Add(time.Hour)))
		read, err = s.SessionGet(ctx, idHash(1))
		require.NoError(t, err)
		require.Equal(t, base.Add(time.Hour), read.LastSeenAt)
		require.Equal(t, want.CreatedAt, read.CreatedAt)
		require.Equal(t, want.ExpiresAt, read.ExpiresAt)

		require.NoError(t, s.SessionDelete(ctx, idHash(1)))
		require.False(t, exists(t, s, 1))
		require.NoError(t, s.SessionDelete(ctx, idHash(1)), "deleting twice is a no-op")
	})

	t.Run("SessionDeleteAll", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		n, err := s.SessionDeleteAll(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "none to delete")
		create(t, s, 1, base, 100)
		create(t, s, 2, base.Add(time.Hour), 100)
		create(t, s, 3, base.Add(2*time.Hour), 100)
		n, err = s.SessionCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		n, err = s.SessionDeleteAll(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n, "every one")
		for i := 1; i <= 3; i++ {
			require.False(t, exists(t, s, i), "session %d", i)
		}
		n, err = s.SessionCount(ctx)
		require.NoError(t, err)
		require.Zero(t, n)

		// Logging in again works as before.
		create(t, s, 4, base.Add(3*time.Hour), 100)
		require.True(t, exists(t, s, 4))
		n, err = s.SessionDeleteAll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	})

	t.Run("SessionBound", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		for i := range 5 {
			create(t, s, i, base.Add(time.Duration(i)*time.Minute), 3)
		}
		n, err := s.SessionCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n, "at most Max, the new one included")
		_, err = s.SessionCreate(ctx, &store.SessionCreateParams{IDHash: []byte("no-room"), Now: base, ExpiresAt: base.Add(time.Hour), Max: 0})
		require.ErrorContains(t, err, "Max must be at least 1")
		n, err = s.SessionCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n, "refused before anything is written")
		for i, want := range []bool{false, false, true, true, true} {
			require.Equal(t, want, exists(t, s, i), "session %d: the oldest go first", i)
		}
	})

	t.Run("SessionSweep", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, 1, base, 100)                  // idle from base
		create(t, s, 2, base.Add(time.Hour), 100)   // touched below
		create(t, s, 3, base.Add(2*time.Hour), 100) // live
		require.NoError(t, s.SessionTouch(ctx, idHash(2), base.Add(5*time.Hour)))
		// At base+13h30m: 1 was last seen 13h30m ago (idle), 2 8h30m ago, 3 11h30m ago.
		now := base.Add(13*time.Hour + 30*time.Minute)
		create(t, s, 4, now, 100)
		require.False(t, exists(t, s, 1), "idle: swept by the next login")
		require.True(t, exists(t, s, 2))
		require.True(t, exists(t, s, 3))
		require.True(t, exists(t, s, 4))

		// Past the absolute expiry everything made before goes, however
		// recently seen.
		later := base.Add(7*24*time.Hour + 3*time.Hour)
		require.NoError(t, s.SessionTouch(ctx, idHash(2), later.Add(-time.Minute)))
		create(t, s, 5, later, 100)
		for i, want := range map[int]bool{2: false, 3: false, 4: false, 5: true} {
			require.Equal(t, want, exists(t, s, i), "session %d", i)
		}
	})
}
