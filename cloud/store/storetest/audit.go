package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// --- audit trail ---

func exerciseAudit(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("AuditTrail", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		t1, t2, t3, t4, t5, t6 := base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second),
			base.Add(3*time.Second+delivery.DefaultRetryPolicy.Delays[1]), base.Add(time.Hour), base.Add(2*time.Hour)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, t1), 1)
		_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: t2})
		require.NoError(t, err)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, t3, delivery.Nack{ID: d.ID, Error: "503", Retryable: true}))
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, t4), 1)
		_, err = s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d.ID}, LeaseFor: time.Hour, Now: t4})
		require.NoError(t, err)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, t5, d.ID))
		// A second delivery of another host interleaves; it must not show up.
		insert(ctx, t, s, b.other.ID, "evt-x", t6, deliveryOpts{})

		type row struct {
			At       time.Time
			From, To store.Status
			Reason   string
			Attempt  int
		}
		var got []row
		var lastID int64
		for _, ev := range events(ctx, t, s, d.ID) {
			require.Equal(t, d.ID, ev.DeliveryID)
			require.Greater(t, ev.ID, lastID, "oldest first")
			lastID = ev.ID
			got = append(got, row{ev.At, ev.From, ev.To, ev.Reason, ev.Attempt})
		}
		require.Equal(t, []row{
			{base, "", store.StatusQueued, store.TransitionReceive.Reason, 0},
			{t1, store.StatusQueued, store.StatusDelivering, store.TransitionLease.Reason, 1},
			{t2, store.StatusDelivering, store.StatusDelivered, store.TransitionDelivered.Reason, 1},
			{t3, store.StatusDelivered, store.StatusRetrying, store.TransitionNack.Reason, 1},
			{t4, store.StatusRetrying, store.StatusDelivering, store.TransitionLease.Reason, 2},
			{t4, store.StatusDelivering, store.StatusDelivering, store.TransitionExtend.Reason, 2},
			{t5, store.StatusDelivering, store.StatusAcked, store.TransitionAck.Reason, 2},
		}, got)

		evs, err := s.DeliveryEventList(ctx, "unknown")
		require.NoError(t, err)
		require.Empty(t, evs)
	})
}
