package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseReport covers a host's report: acks, nacks, extends and release
// in one transaction.
func exerciseReport(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("Report", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var ds []*store.Delivery
		for i, name := range []string{"acked", "nacked", "extended", "lost", "held"} {
			ds = append(ds, insert(ctx, t, s, b.host.ID, "evt-"+name, base.Add(time.Duration(i)*time.Second), deliveryOpts{}))
		}
		acked, nacked, extended, lost, held := ds[0], ds[1], ds[2], ds[3], ds[4]
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, base), 5)
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.other.ID, 1, 0, base), 1)

		now := base.Add(time.Minute)
		res, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{
			HostID: b.host.ID,
			Ack:    &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{acked.ID, o.ID}, Now: now},
			Nack: delivery.NackParams(b.host.ID, []delivery.Nack{{ID: nacked.ID, Error: "400", Retryable: false}},
				delivery.RetryPolicy{}, now),
			Extend:        &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{extended.ID}, LeaseFor: time.Hour, Now: now},
			ReleaseUnheld: delivery.ReleaseUnheldParams(b.host.ID, []string{extended.ID, held.ID}, delivery.RetryPolicy{}, now),
		})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{Acked: 1, Nacked: 1, Extended: 1, Released: 1}, *res,
			"the ack and the nack come before the release: only the unheld one is left to release")
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, acked.ID).Status)
		require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.host.ID, nacked.ID).Status)
		require.Equal(t, "400", get(ctx, t, s, b.host.ID, nacked.ID).LastError)
		require.Equal(t, ptr(now.Add(time.Hour)), get(ctx, t, s, b.host.ID, extended.ID).LeaseExpiresAt)
		got := get(ctx, t, s, b.host.ID, lost.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, ptr(now), got.NextRetryAt, "due at once")
		require.Equal(t, store.TransitionAnswerLost.Reason, lastEvent(ctx, t, s, lost.ID).Reason)
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, held.ID).Status, "held")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.other.ID, o.ID).Status, "another host's is not acked")

		// Each part alone does what its own method does.
		res, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Ack: &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{held.ID}, Now: now}})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{Acked: 1}, *res)
		res, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Extend: &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{extended.ID, held.ID}, LeaseFor: 2 * time.Hour, Now: now}})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{Extended: 1}, *res, "an acked delivery has no lease to extend")
		res, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{}, *res, "an empty report")
	})

	// A webhook handed back unstarted, by a nack or in a report: due again
	// at once, its host woken, the attempt given back; an ordinary nack
	// leaves max_attempts as it was.
	t.Run("HandBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		woken, _ := listenWakeUps(ctx, t, s)
		next := func() string { t.Helper(); return nextWakeUp(t, woken) }
		back := insert(ctx, t, s, b.host.ID, "evt-back", base, deliveryOpts{})
		last := insert(ctx, t, s, b.host.ID, "evt-last", base, deliveryOpts{maxAttempts: 1})
		plain := insert(ctx, t, s, b.host.ID, "evt-plain", base, deliveryOpts{})
		for range 3 {
			require.Equal(t, b.host.ID, next(), "received")
		}
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, base), 3)
		handBack := func(d *store.Delivery) delivery.Nack {
			return delivery.Nack{ID: d.ID, Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true}
		}

		now := base.Add(time.Minute)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, handBack(back)))
		require.Equal(t, b.host.ID, next(), "handed back: its host is woken")
		got := get(ctx, t, s, b.host.ID, back.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, ptr(now), got.NextRetryAt, "due at once")
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, store.DefaultMaxAttempts+1, got.MaxAttempts, "the attempt given back")
		require.Equal(t, "host stopping: not started", got.LastError)
		require.Nil(t, got.LeaseExpiresAt)
		ev := lastEvent(ctx, t, s, back.ID)
		require.Equal(t, store.TransitionHandBack.Reason, ev.Reason)
		require.Equal(t, store.StatusDelivered, ev.From)
		require.Equal(t, store.StatusRetrying, ev.To)

		// In a report, on its last attempt: retrying, not dead-lettered.
		res, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Nack: delivery.NackParams(b.host.ID, []delivery.Nack{handBack(last)}, delivery.RetryPolicy{}, now)})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{Nacked: 1}, *res)
		require.Equal(t, b.host.ID, next(), "woken by a report's hand-back too")
		got = get(ctx, t, s, b.host.ID, last.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, ptr(now), got.NextRetryAt)
		require.Equal(t, 2, got.MaxAttempts)
		require.Nil(t, got.DLQAt)
		require.Equal(t, store.TransitionHandBack.Reason, lastEvent(ctx, t, s, last.ID).Reason)

		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: plain.ID, Error: "503", Retryable: true}))
		got = get(ctx, t, s, b.host.ID, plain.ID)
		require.Equal(t, store.DefaultMaxAttempts, got.MaxAttempts, "an ordinary nack leaves max_attempts")
		require.Equal(t, ptr(now.Add(30*time.Second)), got.NextRetryAt)

		// Handed out again, the next attempt is the second: a late hand-back
		// of the first changes nothing.
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, now), 2)
		require.Zero(t, nack(ctx, t, s, b.host.ID, now, handBack(back)))
		got = get(ctx, t, s, b.host.ID, back.ID)
		require.Equal(t, store.StatusDelivered, got.Status)
		require.Equal(t, 2, got.Attempts)
		require.Equal(t, store.DefaultMaxAttempts+1, got.MaxAttempts)
	})

	// A requeue starts the attempts over, and the budget with them: what
	// hand-backs raised since the last requeue is taken back, so a retried or
	// revived delivery has the attempts it was stored with.
	t.Run("RequeueAfterHandBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-budget", base, deliveryOpts{maxAttempts: 2})
		now := base
		handBack := func() {
			t.Helper()
			now = now.Add(time.Minute)
			require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, now), 1)
			require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now,
				delivery.Nack{ID: d.ID, Error: "host stopping: not started", Retryable: true, Attempt: get(ctx, t, s, b.host.ID, d.ID).Attempts, NotStarted: true}))
		}
		deadLetter := func() {
			t.Helper()
			now = now.Add(time.Minute)
			require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, now), 1)
			require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now,
				delivery.Nack{ID: d.ID, Error: "400", Retryable: false, Attempt: get(ctx, t, s, b.host.ID, d.ID).Attempts}))
			require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.host.ID, d.ID).Status)
		}
		handBack()
		handBack()
		require.Equal(t, 4, get(ctx, t, s, b.host.ID, d.ID).MaxAttempts, "two attempts given back")
		deadLetter()

		retry := func() *store.Delivery {
			t.Helper()
			got, err := s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: d.ID, Now: now})
			require.NoError(t, err)
			return got
		}
		got := retry()
		require.Equal(t, store.StatusQueued, got.Status)
		require.Zero(t, got.Attempts)
		require.Equal(t, 2, got.MaxAttempts, "as stored")

		// Hand-backs before the last requeue were taken back already.
		handBack()
		require.Equal(t, 3, get(ctx, t, s, b.host.ID, d.ID).MaxAttempts)
		got = retry()
		require.Equal(t, 2, got.MaxAttempts)
		// An ordinary failure since: nothing to take back.
		now = now.Add(time.Minute)
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, now), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: "503", Retryable: true, Attempt: 1}))
		got = retry()
		require.Equal(t, 2, got.MaxAttempts, "nothing handed back since")

		// Revived by the provider's repeat: the same.
		handBack()
		deadLetter()
		res := insertFor(ctx, t, s, insertParams(b.host.ID, "evt-budget", now, deliveryOpts{maxAttempts: 2}), store.InsertRevived)
		require.Equal(t, 2, res.Delivery.MaxAttempts)
		require.Zero(t, res.Delivery.Attempts)
		require.Equal(t, 2, get(ctx, t, s, b.host.ID, d.ID).MaxAttempts)
	})

	// A report is one transaction: a part that fails leaves none applied.
	t.Run("ReportAllOrNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		e := insert(ctx, t, s, b.host.ID, "evt-2", base, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, base), 2)
		now := base.Add(time.Minute)
		fctx, cancel := context.WithCancel(ctx)
		nk := delivery.NackParams(b.host.ID, []delivery.Nack{{ID: e.ID, Retryable: true}}, delivery.RetryPolicy{}, now)
		decide := nk.Fail
		nk.Fail = func(f store.Failing) (store.Failure, bool) {
			cancel() // the transaction's statements after this one fail
			return decide(f)
		}
		_, err := s.DeliveryReport(fctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Ack:  &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: now},
			Nack: nk,
		})
		require.Error(t, err)
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, d.ID).Status, "the ack rolled back")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, e.ID).Status)
	})
}
