package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseLease covers leasing.
func exerciseLease(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseFIFO", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Inserted newest first; leased oldest first.
		var want []string
		for i := 4; i >= 0; i-- {
			d := insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{})
			want = append([]string{d.ID}, want...)
		}
		insert(ctx, t, s, b.other.ID, "evt-other", base.Add(-time.Hour), deliveryOpts{})

		now := base.Add(time.Minute)
		first := lease(ctx, t, s, b.host.ID, 3, 0, now)
		require.Equal(t, want[:3], ids(first))
		for _, d := range first {
			require.Equal(t, b.host.ID, d.HostID)
			require.Equal(t, store.StatusDelivering, d.Status)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, ptr(now.Add(leaseFor)), d.LeaseExpiresAt)
			require.Equal(t, []byte(`{"event":"`+d.EventID+`"}`), d.RawBody, "leased deliveries carry their body")
			require.Equal(t, "pull_request", d.Headers["x-github-event"])
			require.Equal(t, d, get(ctx, t, s, b.host.ID, d.ID))

			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, store.StatusQueued, ev.From)
			require.Equal(t, store.StatusDelivering, ev.To)
			require.Equal(t, store.TransitionLease.Reason, ev.Reason)
			require.Equal(t, 1, ev.Attempt)
			require.Equal(t, now, ev.At)
		}
		require.Equal(t, want[3:], ids(lease(ctx, t, s, b.host.ID, 3, 0, now)))
		require.Empty(t, lease(ctx, t, s, b.host.ID, 3, 0, now), "leased ones are not handed out again")

		other := lease(ctx, t, s, b.other.ID, 10, 0, now)
		require.Len(t, other, 1, "the other host's deliveries were never leased to host a")
	})

	t.Run("LeaseBounds", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := func(n int) []byte { return []byte(fmt.Sprintf("%0*d", n, n)) }
		sizes := []int{10, 10, 10, 100, 10, 10}
		var all []string
		for i, n := range sizes {
			all = append(all, insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{body: body(n)}).ID)
		}
		now := base.Add(time.Minute)
		require.Equal(t, all[0:2], ids(lease(ctx, t, s, b.host.ID, 10, 20, now)), "byte bound, inclusive")
		require.Equal(t, all[2:3], ids(lease(ctx, t, s, b.host.ID, 10, 50, now)), "FIFO: stops at the first that does not fit")
		require.Equal(t, all[3:4], ids(lease(ctx, t, s, b.host.ID, 10, 50, now)), "a larger one goes alone")
		require.Equal(t, all[4:5], ids(lease(ctx, t, s, b.host.ID, 1, 1000, now)), "count bound")
		require.Equal(t, all[5:6], ids(lease(ctx, t, s, b.host.ID, 10, 0, now)), "no byte bound")
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, now))
	})

	t.Run("LeaseRetrying", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "503", Retryable: true}))
		due := base.Add(delivery.DefaultRetryPolicy.Delays[1])
		require.Equal(t, ptr(due), get(ctx, t, s, b.host.ID, d.ID).NextRetryAt)

		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, due.Add(-time.Millisecond)), "not due yet")
		leased := lease(ctx, t, s, b.host.ID, 10, 0, due)
		require.Equal(t, []string{d.ID}, ids(leased), "due")
		require.Equal(t, 2, leased[0].Attempts)
		require.Nil(t, leased[0].NextRetryAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusRetrying, ev.From)
		require.Equal(t, store.StatusDelivering, ev.To)
		require.Equal(t, 2, ev.Attempt)
	})

	t.Run("MarkDelivered", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		d2 := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		o1 := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		now := base.Add(time.Second)
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d1.ID, d2.ID, o1.ID, "nope"}, Now: now})
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the host's leased delivery")
		got := get(ctx, t, s, b.host.ID, d1.ID)
		require.Equal(t, store.StatusDelivered, got.Status)
		require.Equal(t, ptr(now), got.DeliveredAt)
		require.Equal(t, ptr(base.Add(leaseFor)), got.LeaseExpiresAt, "still under lease until acked")
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, d2.ID).Status)
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, o1.ID).Status)

		ev := lastEvent(ctx, t, s, d1.ID)
		require.Equal(t, store.StatusDelivering, ev.From)
		require.Equal(t, store.StatusDelivered, ev.To)
		require.Equal(t, store.TransitionDelivered.Reason, ev.Reason)
		require.Equal(t, 1, ev.Attempt)

		n, err = s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d1.ID}, Now: now})
		require.NoError(t, err)
		require.Zero(t, n, "already delivered")
	})

	t.Run("ReleaseUnwritten", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		second := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		written := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		last := insert(ctx, t, s, b.host.ID, "evt-4", base.Add(3*time.Second), deliveryOpts{maxAttempts: 1})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 2, 0, base), 2)
		require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		// The answer carrying first, second and last was not written. Only
		// the caller's count, only while delivering.
		now := base.Add(time.Second)
		n, err := s.DeliveryRelease(ctx, delivery.ReleaseParams(b.host.ID, []string{first.ID, second.ID, written.ID, last.ID, o.ID, "unknown"}, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, d := range []*store.Delivery{first, second} {
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, store.StatusRetrying, got.Status, d.ID)
			require.Equal(t, 1, got.Attempts, "the attempt counts")
			require.Equal(t, ptr(now), got.NextRetryAt, "due at once: the handler never ran")
			require.Nil(t, got.LeaseExpiresAt, d.ID)
			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, store.StatusDelivering, ev.From)
			require.Equal(t, store.StatusRetrying, ev.To)
			require.Equal(t, store.TransitionRelease.Reason, ev.Reason)
			require.Equal(t, 1, ev.Attempt)
		}
		// Out of attempts, it is dead-lettered: an answer that can never be
		// written does not hold its host's queue forever.
		got := get(ctx, t, s, b.host.ID, last.ID)
		require.Equal(t, store.StatusDLQ, got.Status)
		require.Equal(t, store.TransitionRelease.Reason+": attempts exhausted, dead-lettered", lastEvent(ctx, t, s, last.ID).Reason)
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, written.ID).Status, "handed out: not released")
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, o.ID).Status, "another host's: untouched")

		// Available at once, in their order, as second attempts.
		again := lease(ctx, t, s, b.host.ID, 10, 0, now)
		require.Equal(t, []string{first.ID, second.ID}, ids(again))
		require.Equal(t, 2, again[0].Attempts)
	})
}

func exerciseReleaseUnheld(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ReleaseUnheld", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		unwritten := leaseOne(ctx, t, s, b.host.ID, "evt-1", base)
		lost := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		held := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 2, 0, base), 2)
		queued := insert(ctx, t, s, b.host.ID, "evt-4", base.Add(3*time.Second), deliveryOpts{})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.other.ID, 1, 0, base), 1)

		// The host lost an answer and holds only evt-3.
		now := base.Add(time.Minute)
		n, err := s.DeliveryReleaseUnheld(ctx, delivery.ReleaseUnheldParams(b.host.ID, []string{held.ID, "unknown"}, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, d := range []*store.Delivery{unwritten, lost} {
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, store.StatusRetrying, got.Status, d.ID)
			require.Equal(t, 1, got.Attempts, d.ID)
			require.Equal(t, ptr(now), got.NextRetryAt, "due at once")
			require.Equal(t, store.TransitionAnswerLost.Reason, lastEvent(ctx, t, s, d.ID).Reason)
		}
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, held.ID).Status, "held")
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, queued.ID).Status, "not leased")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.other.ID, o.ID).Status, "another host's")
		require.Equal(t, []string{unwritten.ID, lost.ID, queued.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, now)))

		// Holding nothing: everything leased to it.
		n, err = s.DeliveryReleaseUnheld(ctx, delivery.ReleaseUnheldParams(b.host.ID, nil, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 4, n)
	})
}

// exerciseExpiry covers the expiry of leases.
func exerciseExpiry(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ExpireLeases", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		early := leaseOne(ctx, t, s, b.host.ID, "evt-early", base)
		delivered := leaseOne(ctx, t, s, b.host.ID, "evt-delivered", base.Add(time.Second))
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
			require.Equal(t, 1, expire(ctx, t, s, delivery.RetryPolicy{}, now)) // zero policy: the default
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

// exerciseConcurrency covers leasing from several workers at once.
func exerciseConcurrency(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseConcurrently", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const total, workers = 2000, 8
		want := make(map[string]bool, total)
		// Insert from a few goroutines too: inserts must not collide either.
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, total)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < total; i += 4 {
					p := insertParams(b.host.ID, fmt.Sprintf("evt-%04d", i), base.Add(time.Duration(i)*time.Millisecond), deliveryOpts{})
					res, err := s.DeliveryInsert(ctx, p)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					want[res.Delivery.ID] = true
					mu.Unlock()
				}
			})
		}
		waitNoErrors(t, &wg, errs)
		require.Len(t, want, total)
		insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})

		// All leases are taken at the same instant and stay valid, so no
		// delivery may be handed out twice.
		now := base.Add(time.Hour)
		got := make(map[string]int, total)
		var batches int
		errs = make(chan error, total+workers)
		for range workers {
			wg.Go(func() {
				for {
					res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: b.host.ID, Max: 7, MaxBytes: 1 << 20, LeaseFor: time.Hour, Now: now})
					if err != nil {
						errs <- err
						return
					}
					ds := res.Deliveries
					if len(ds) == 0 {
						return
					}
					mu.Lock()
					batches++
					if len(ds) > 7 {
						errs <- fmt.Errorf("a batch of %d over Max 7", len(ds))
					}
					for _, d := range ds {
						got[d.ID]++
						if d.HostID != b.host.ID {
							errs <- fmt.Errorf("leased %s of host %s", d.ID, d.HostID)
						}
					}
					mu.Unlock()
				}
			})
		}
		waitNoErrors(t, &wg, errs)
		require.Len(t, got, total)
		for id, n := range got {
			require.True(t, want[id], id)
			require.Equal(t, 1, n, "%s leased %d times", id, n)
		}
		require.GreaterOrEqual(t, batches, total/7, "no batch over Max")

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, total, counts[store.StatusDelivering])
		require.Empty(t, lease(ctx, t, s, b.host.ID, 100, 0, now))
		other, err := s.DeliveryCountByStatus(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, 1, other[store.StatusQueued])
	})
}

// listen runs s.DeliveryListen with p until stop is called or the test
// ends, and returns once it listens (p.Listening is its own); stop ends it
// and returns what DeliveryListen returned.
