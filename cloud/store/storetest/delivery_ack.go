package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseAckNack covers acks, nacks and extends.
func exerciseAckNack(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("Ack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// One delivery in each ackable state.
		leased := leaseEach(ctx, t, s, b.host.ID, base, "evt-delivering", "evt-delivered", "evt-retrying")
		delivering, delivered, retrying := leased[0], leased[1], leased[2]
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{delivered.ID}, Now: base})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: retrying.ID, Error: "x", Retryable: true}))
		dlq := toDLQ(ctx, t, s, b.host.ID, "evt-dlq", base.Add(3*time.Millisecond))
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Hour), deliveryOpts{})
		other := insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		before := map[string]store.Status{}
		for _, d := range []*store.Delivery{delivering, delivered, retrying, dlq, queued} {
			before[d.ID] = get(ctx, t, s, b.host.ID, d.ID).Status
		}

		// Another host's ack changes nothing.
		require.Zero(t, ack(ctx, t, s, b.other.ID, base, delivering.ID, delivered.ID))
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.host.ID, delivering.ID).Status)

		now := base.Add(time.Second)
		require.Equal(t, 4, ack(ctx, t, s, b.host.ID, now, delivering.ID, delivered.ID, retrying.ID, dlq.ID, queued.ID, other.ID, "unknown"))
		// A queued delivery was never handed out: an ack of it is stale.
		got := get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status)
		require.Nil(t, got.AckedAt)
		require.Len(t, events(ctx, t, s, queued.ID), 1)
		delete(before, queued.ID)
		for id, from := range before {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			require.Equal(t, ptr(now), d.AckedAt, id)
			require.Nil(t, d.LeaseExpiresAt, id)
			require.Nil(t, d.NextRetryAt, id)
			ev := lastEvent(ctx, t, s, id)
			require.Equal(t, from, ev.From, id)
			require.Equal(t, store.StatusAcked, ev.To, id)
			require.Equal(t, store.TransitionAck.Reason, ev.Reason, id)
			require.Equal(t, d.Attempts, ev.Attempt, id)
			require.Equal(t, now, ev.At, id)
		}
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, other.ID).Status, "other host's delivery untouched")

		// Acking again changes nothing and records nothing.
		trail := len(events(ctx, t, s, delivering.ID))
		require.Zero(t, ack(ctx, t, s, b.host.ID, now.Add(time.Second), delivering.ID))
		require.Len(t, events(ctx, t, s, delivering.ID), trail)
		require.Equal(t, ptr(now), get(ctx, t, s, b.host.ID, delivering.ID).AckedAt)
		require.Zero(t, ack(ctx, t, s, b.host.ID, now))
	})

	t.Run("AckRecordsWhatWasWrittenDelivered", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Written to the host and not yet marked delivered: one at each of
		// two times; one marked already; one whose lease expired
		// (retrying); one written and not acked.
		leased := leaseEach(ctx, t, s, b.host.ID, base, "evt-early", "evt-late", "evt-marked", "evt-retrying", "evt-unacked")
		early, late, marked, retrying, unacked := leased[0], leased[1], leased[2], leased[3], leased[4]
		markedAt, earlyAt, lateAt := base.Add(10*time.Millisecond), base.Add(20*time.Millisecond), base.Add(30*time.Millisecond)
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{marked.ID}, Now: markedAt})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: retrying.ID, Error: "x", Retryable: true}))
		trails := map[string][]store.DeliveryEvent{}
		for _, d := range []*store.Delivery{early, late, marked, retrying, unacked} {
			trails[d.ID] = eventsButIdentity(events(ctx, t, s, d.ID))
		}

		now := base.Add(time.Second)
		written := []store.Written{
			{ID: early.ID, At: earlyAt}, {ID: marked.ID, At: earlyAt}, {ID: retrying.ID, At: earlyAt},
			{ID: late.ID, At: lateAt}, {ID: unacked.ID, At: lateAt},
		}
		n, err = s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{early.ID, late.ID, marked.ID, retrying.ID}, Written: written, Now: now})
		require.NoError(t, err)
		require.Equal(t, 4, n)

		for id, at := range map[string]time.Time{early.ID: earlyAt, late.ID: lateAt} {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			require.Equal(t, ptr(at), d.DeliveredAt, "delivered when written")
			require.Equal(t, ptr(now), d.AckedAt, id)
			want := append(trails[id],
				store.DeliveryEvent{At: at, From: store.StatusDelivering, To: store.StatusDelivered, Reason: store.TransitionDelivered.Reason, Attempt: 1},
				store.DeliveryEvent{At: now, From: store.StatusDelivered, To: store.StatusAcked, Reason: store.TransitionAck.Reason, Attempt: 1})
			require.Equal(t, want, eventsButIdentity(events(ctx, t, s, id)), id)
		}
		// Marked already, or no longer delivering: acked as ever.
		for id, from := range map[string]store.Status{marked.ID: store.StatusDelivered, retrying.ID: store.StatusRetrying} {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			want := append(trails[id], store.DeliveryEvent{At: now, From: from, To: store.StatusAcked, Reason: store.TransitionAck.Reason, Attempt: d.Attempts})
			require.Equal(t, want, eventsButIdentity(events(ctx, t, s, id)), id)
		}
		require.Equal(t, ptr(markedAt), get(ctx, t, s, b.host.ID, marked.ID).DeliveredAt)
		// Written but not acked here: left to its own mark.
		d := get(ctx, t, s, b.host.ID, unacked.ID)
		require.Equal(t, store.StatusDelivering, d.Status)
		require.Nil(t, d.DeliveredAt)
		require.Equal(t, trails[unacked.ID], eventsButIdentity(events(ctx, t, s, unacked.ID)))
	})

	t.Run("AckAfterLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		late := base.Add(leaseFor + time.Minute)
		d := handOutExpired(ctx, t, s, b.host.ID, "evt-1", late)
		require.Equal(t, store.StatusRetrying, get(ctx, t, s, b.host.ID, d.ID).Status)

		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, late, d.ID), "a late ack still counts")
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, d.ID).Status)
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, late.Add(time.Hour)), "an acked delivery is never handed out again")
	})

	t.Run("NackSchedule", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		policy := delivery.DefaultRetryPolicy
		now := base
		for attempt := 1; attempt <= policy.MaxAttempts(); attempt++ {
			leased := lease(ctx, t, s, b.host.ID, 10, 0, now)
			require.Equal(t, []string{d.ID}, ids(leased), "attempt %d", attempt)
			require.Equal(t, attempt, leased[0].Attempts)
			// Delivered or not, a leased delivery can be nacked.
			if attempt%2 == 0 {
				_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: now})
				require.NoError(t, err)
			}
			msg := fmt.Sprintf("failure %d", attempt)
			require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: msg, Retryable: true}))
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, msg, got.LastError)
			require.Nil(t, got.LeaseExpiresAt)
			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, attempt, ev.Attempt)
			require.Equal(t, now, ev.At)
			if attempt < policy.MaxAttempts() {
				require.Equal(t, store.StatusRetrying, got.Status, "attempt %d", attempt)
				require.Equal(t, ptr(now.Add(policy.Delays[attempt])), got.NextRetryAt, "attempt %d", attempt)
				require.Nil(t, got.DLQAt)
				require.Equal(t, store.TransitionNack.Reason, ev.Reason)
				require.Equal(t, store.StatusRetrying, ev.To)
				now = *got.NextRetryAt
				continue
			}
			require.Equal(t, store.StatusDLQ, got.Status, "after the fifth failure")
			require.Nil(t, got.NextRetryAt)
			require.Equal(t, ptr(now), got.DLQAt)
			require.Equal(t, store.StatusDLQ, ev.To)
			require.Contains(t, ev.Reason, store.TransitionNack.Reason)
		}
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, now.Add(24*time.Hour)), "dead letters are not leased")
	})

	t.Run("NackNotRetryable", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := leaseOne(ctx, t, s, b.host.ID, "evt-1", base)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "400 bad request", Retryable: false}))
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusDLQ, got.Status, "at once")
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, "400 bad request", got.LastError)
		require.Equal(t, ptr(base), got.DLQAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusDelivering, ev.From)
		require.Equal(t, store.StatusDLQ, ev.To)
	})

	t.Run("NackMaxAttempts", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{maxAttempts: 2})
		require.Equal(t, 2, d.MaxAttempts)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "x", Retryable: true}))
		now := *get(ctx, t, s, b.host.ID, d.ID).NextRetryAt
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, now), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: "x", Retryable: true}))
		require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.host.ID, d.ID).Status, "the delivery's own max_attempts")
	})

	t.Run("NackIgnored", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		leased := leaseOne(ctx, t, s, b.host.ID, "evt-leased", base)
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Second), deliveryOpts{})

		// Another host's nack changes nothing.
		require.Zero(t, nack(ctx, t, s, b.other.ID, base, delivery.Nack{ID: leased.ID, Error: "x", Retryable: false}))
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.host.ID, leased.ID).Status)
		// A nack of a delivery that is not leased changes nothing.
		require.Zero(t, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: queued.ID, Error: "x", Retryable: false}, delivery.Nack{ID: "unknown", Error: "x"}))
		got := get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status)
		require.Empty(t, got.LastError)
		// A nack after the failure was counted changes nothing either.
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: leased.ID, Error: "first", Retryable: true}))
		require.Zero(t, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: leased.ID, Error: "second", Retryable: false}))
		got = get(ctx, t, s, b.host.ID, leased.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, "first", got.LastError)
		require.Equal(t, 1, got.Attempts)
		require.Len(t, events(ctx, t, s, queued.ID), 1)
	})

	t.Run("Extend", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		d2 := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 2, 0, base), 2)
		queued := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		now := base.Add(4 * time.Minute)
		n, err := s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d1.ID, queued.ID, o.ID, "unknown"}, LeaseFor: 10 * time.Minute, Now: now})
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the caller's leased ones")
		got := get(ctx, t, s, b.host.ID, d1.ID)
		require.Equal(t, store.StatusDelivered, got.Status)
		require.Equal(t, 1, got.Attempts, "extending is not an attempt")
		require.Equal(t, ptr(now.Add(10*time.Minute)), got.LeaseExpiresAt)
		require.Equal(t, ptr(base.Add(leaseFor)), get(ctx, t, s, b.host.ID, d2.ID).LeaseExpiresAt)
		require.Nil(t, get(ctx, t, s, b.host.ID, queued.ID).LeaseExpiresAt)
		require.Equal(t, ptr(base.Add(leaseFor)), get(ctx, t, s, b.other.ID, o.ID).LeaseExpiresAt)
		ev := lastEvent(ctx, t, s, d1.ID)
		require.Equal(t, store.StatusDelivered, ev.From)
		require.Equal(t, store.StatusDelivered, ev.To)
		require.Equal(t, store.TransitionExtend.Reason, ev.Reason)

		// Past the original lease: the extended one lives on, the other expires.
		require.Equal(t, 2, expire(ctx, t, s, delivery.DefaultRetryPolicy, base.Add(leaseFor+time.Minute)), "d2 and the other host's")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, d1.ID).Status)
		require.Equal(t, store.StatusRetrying, get(ctx, t, s, b.host.ID, d2.ID).Status)
		// The other host's answer was never written: due again at once.
		got = get(ctx, t, s, b.other.ID, o.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, ptr(base.Add(leaseFor+time.Minute)), got.NextRetryAt)
		require.Equal(t, []string{queued.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, base.Add(leaseFor+time.Minute))),
			"d1 still leased, d2 not due yet")

		n, err = s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d2.ID}, LeaseFor: time.Hour, Now: now})
		require.NoError(t, err)
		require.Zero(t, n, "a retrying delivery has no lease to extend")
	})
}

// exerciseAudit covers the audit trail a delivery's changes leave.
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

// leaseEach inserts a delivery of hostID for each event, a millisecond
// apart from at on, and leases them all at at: the deliveries, in that
// order.
func leaseEach(ctx context.Context, t *testing.T, s store.Store, hostID string, at time.Time, events ...string) []*store.Delivery {
	t.Helper()
	ds := make([]*store.Delivery, len(events))
	for i, ev := range events {
		ds[i] = insert(ctx, t, s, hostID, ev, at.Add(time.Duration(i)*time.Millisecond), deliveryOpts{})
	}
	require.Len(t, lease(ctx, t, s, hostID, len(events), 0, at), len(events))
	return ds
}

// handOutExpired hands a delivery out at base (handOutOne) and lets its
// lease expire at expiredAt under the default retry policy: the delivery,
// now retrying.
func handOutExpired(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, expiredAt time.Time) *store.Delivery {
	t.Helper()
	d := handOutOne(ctx, t, s, hostID, eventID, base)
	require.Equal(t, 1, expire(ctx, t, s, delivery.DefaultRetryPolicy, expiredAt))
	return d
}
