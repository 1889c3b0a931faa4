package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// --- what the console charts ---

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
	})
}
