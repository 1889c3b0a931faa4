package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// --- lease expiry ---

func exerciseExpiry(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ExpireLeases", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		early := insert(ctx, t, s, b.host.ID, "evt-early", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		delivered := insert(ctx, t, s, b.host.ID, "evt-delivered", base.Add(time.Second), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base.Add(time.Second)), 1)
		_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{delivered.ID}, Now: base.Add(time.Second)})
		require.NoError(t, err)
		valid := insert(ctx, t, s, b.host.ID, "evt-valid", base.Add(2*time.Second), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base.Add(time.Hour)), 1)
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(3*time.Second), deliveryOpts{})

		expire := func(now time.Time, limit int) int {
			n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, limit, now))
			require.NoError(t, err)
			return n
		}
		require.Zero(t, expire(base.Add(leaseFor), 0), "a lease ending exactly now has not ended before now")

		now := base.Add(leaseFor + 2*time.Second)
		require.Equal(t, 1, expire(now, 1), "limit")
		require.Equal(t, 1, expire(now, 1))
		require.Zero(t, expire(now, 1))

		// A lease whose answer was written is a failed attempt.
		got := get(ctx, t, s, b.host.ID, delivered.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, ptr(now.Add(delivery.DefaultRetryPolicy.Delays[1])), got.NextRetryAt)
		require.Nil(t, got.LeaseExpiresAt)
		require.NotEmpty(t, got.LastError)
		requireLastEvent(ctx, t, s, store.DeliveryEvent{DeliveryID: delivered.ID, At: now,
			From: store.StatusDelivered, To: store.StatusRetrying, Reason: store.TransitionExpire.Reason, Attempt: 1})

		// One whose answer was never written (the cloud stopped between
		// leasing and answering) never reached its handler: the attempt
		// counts, but it is due again at once.
		got = get(ctx, t, s, b.host.ID, early.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, ptr(now), got.NextRetryAt)
		require.Nil(t, got.LeaseExpiresAt)
		requireLastEvent(ctx, t, s, store.DeliveryEvent{DeliveryID: early.ID, At: now,
			From: store.StatusDelivering, To: store.StatusRetrying, Reason: store.TransitionExpireUnwritten.Reason, Attempt: 1})

		got = get(ctx, t, s, b.host.ID, valid.ID)
		require.Equal(t, store.StatusDelivering, got.Status, "a valid lease is untouched")
		require.Equal(t, 1, got.Attempts)
		got = get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status, "an offline host burns no attempts")
		require.Zero(t, got.Attempts)
	})

	t.Run("ExpireLeasesToDLQ", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{maxAttempts: 2})
		now := base
		for attempt := 1; attempt <= 2; attempt++ {
			require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, now), 1)
			now = now.Add(leaseFor + time.Millisecond)
			n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.RetryPolicy{}, 0, now)) // zero policy: the default
			require.NoError(t, err)
			require.Equal(t, 1, n)
			if attempt == 1 {
				got := get(ctx, t, s, b.host.ID, d.ID)
				require.Equal(t, store.StatusRetrying, got.Status)
				now = *got.NextRetryAt
			}
		}
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusDLQ, got.Status)
		require.Equal(t, ptr(now), got.DLQAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusDLQ, ev.To)
		require.Contains(t, ev.Reason, store.TransitionExpire.Reason)
	})
}
