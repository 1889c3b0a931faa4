package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
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

// exerciseVolume covers what the console charts.
func exerciseVolume(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryVolume", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		h := b.host.ID
		// Before the window: received out of it, acked in it.
		d4 := insert(ctx, t, s, h, "evt-4", base.Add(-25*time.Hour), deliveryOpts{})
		handOut(ctx, t, s, h, 10, 0, base.Add(-25*time.Hour))
		// base is 10:00: the hour 21 of a window ending at 13:00.
		d1 := insert(ctx, t, s, h, "evt-1", base, deliveryOpts{})
		handOut(ctx, t, s, h, 10, 0, base.Add(time.Minute))
		d2 := insert(ctx, t, s, h, "evt-2", base.Add(5*time.Minute), deliveryOpts{})
		d3 := insert(ctx, t, s, h, "evt-3", base.Add(61*time.Minute), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, h, 10, 0, base.Add(62*time.Minute)), 2)
		require.Equal(t, 1, nack(ctx, t, s, h, base.Add(65*time.Minute), delivery.Nack{ID: d3.ID, Error: "503", Retryable: true}))
		require.Equal(t, 1, nack(ctx, t, s, h, base.Add(66*time.Minute), delivery.Nack{ID: d2.ID, Error: "bad", Retryable: false}))
		require.Equal(t, 1, ack(ctx, t, s, h, base.Add(70*time.Minute), d1.ID))
		require.Equal(t, 1, ack(ctx, t, s, h, base.Add(130*time.Minute), d4.ID))
		// After the window's end: not counted.
		insert(ctx, t, s, h, "evt-late", base.Add(3*time.Hour), deliveryOpts{})
		insert(ctx, t, s, b.other.ID, "evt-o", base.Add(2*time.Hour), deliveryOpts{})
		for _, r := range []*store.Rejection{
			{HostID: h, Source: "github", At: base.Add(30 * time.Minute), Status: 401, Reason: "signature"},
			{HostID: h, Source: "github", At: base.Add(-30 * time.Hour), Status: 401, Reason: "signature"},
			{HostID: b.other.ID, Source: "github", At: base.Add(2 * time.Hour), Status: 429, Reason: "rate"},
		} {
			require.NoError(t, s.RejectionInsert(ctx, r))
		}

		now := base.Add(150 * time.Minute) // 12:30
		volume := func(p store.DeliveryVolumeParams) []store.VolumeHour {
			t.Helper()
			p.Now = now
			v, err := s.DeliveryVolume(ctx, &p)
			require.NoError(t, err)
			return v
		}
		hour := func(i int) time.Time { return base.Add(-21*time.Hour + time.Duration(i)*time.Hour) }
		want := make([]store.VolumeHour, 24)
		for i := range want {
			want[i].Start = hour(i)
		}
		want[21].Received, want[21].Rejected = 2, 1
		want[22] = store.VolumeHour{Start: hour(22), Received: 1, Acked: 1, Failed: 1, DeadLettered: 1}
		want[23].Acked = 1
		got := volume(store.DeliveryVolumeParams{HostID: h})
		require.Equal(t, want, got, "one host, 24 hours")
		require.Equal(t, 4, got[22].Total())

		want[23].Received, want[23].Rejected = 1, 1
		require.Equal(t, want, volume(store.DeliveryVolumeParams{}), "every host")
		require.Equal(t, want[21:], volume(store.DeliveryVolumeParams{Hours: 3}), "the last 3 hours")

		received := volume(store.DeliveryVolumeParams{HostID: h, ReceivedOnly: true})
		require.Equal(t, 2, received[21].Received)
		require.Equal(t, 1, received[22].Received)
		require.Equal(t, 1, received[22].Total(), "received only")
		for _, v := range volume(store.DeliveryVolumeParams{HostID: "no-such-host"}) {
			require.Zero(t, v.Total())
		}
		for _, hours := range []int{-1, 25} {
			_, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Hours: hours, Now: now})
			require.Error(t, err, "hours %d", hours)
		}

		byHost, err := s.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now})
		require.NoError(t, err)
		wantByHost := map[string][]int{h: make([]int, 24), b.other.ID: make([]int, 24)}
		wantByHost[h][21], wantByHost[h][22], wantByHost[b.other.ID][23] = 2, 1, 1
		require.Equal(t, wantByHost, byHost, "each host's received, those with none left out")

		// Folded up to two minutes ago, an hour at a time: the same
		// counts, the hours before the fold read as kept.
		params := []store.DeliveryVolumeParams{{HostID: h}, {}, {Hours: 3}, {HostID: h, ReceivedOnly: true}, {HostID: b.other.ID}}
		before := make([][]store.VolumeHour, len(params))
		for i, p := range params {
			before[i] = volume(p)
		}
		fold := func(until time.Time) int { return FoldVolume(ctx, t, s, until) }
		require.Positive(t, fold(now.Add(-2*time.Minute)))
		require.Zero(t, fold(now.Add(-2*time.Minute)), "folded once")
		require.Zero(t, fold(now.Add(-time.Hour)), "never moved back")
		for i, p := range params {
			require.Equal(t, before[i], volume(p), "%+v folded", p)
		}
		byHost, err = s.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now})
		require.NoError(t, err)
		require.Equal(t, wantByHost, byHost, "folded")

		// What happens after the fold is counted as it stands; what was
		// folded is kept as it was counted: a delivery received in a
		// folded hour and pruned since stays in its hour's count.
		insert(ctx, t, s, h, "evt-new", now.Add(-time.Minute), deliveryOpts{})
		// Of some hosts only (a page of the hosts page): the hours kept
		// and those counted as they stand.
		byHost, err = s.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now, HostIDs: []string{b.other.ID, "no-such-host"}})
		require.NoError(t, err)
		require.Equal(t, map[string][]int{b.other.ID: wantByHost[b.other.ID]}, byHost, "the other host's alone")
		byHost, err = s.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now, HostIDs: []string{h}})
		require.NoError(t, err)
		wantHost := append([]int(nil), wantByHost[h]...)
		wantHost[23]++
		require.Equal(t, map[string][]int{h: wantHost}, byHost, "the host's, the one received since the fold included")
		byHost, err = s.DeliveryVolumeByHost(ctx, &store.DeliveryVolumeParams{Now: now, HostIDs: []string{}})
		require.NoError(t, err)
		require.Empty(t, byHost, "of no host")
		n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked,
			PruneParams: store.PruneParams{Before: base.Add(3 * time.Hour)}})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		got = volume(store.DeliveryVolumeParams{HostID: h})
		require.Equal(t, before[0][:23], got[:23], "the hours folded, as they were")
		require.Equal(t, before[0][23].Received+1, got[23].Received, "the last minutes counted as they stand")
		require.Equal(t, 3, fold(now), "the host's received and every host's, and the mark moved on")
		require.Equal(t, got, volume(store.DeliveryVolumeParams{HostID: h}))

		// Three days on, the hours kept of today are forgotten: no window
		// reaches them any more.
		require.Positive(t, fold(now.Add(72*time.Hour)))
		for _, v := range volume(store.DeliveryVolumeParams{}) {
			require.Zero(t, v.Total(), "%v forgotten", v.Start)
		}
	})
}
