package flow

import (
	"context"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// FailureSteps are what applying failures takes of an engine: its SQL, in
// one transaction.
type FailureSteps interface {
	// Fail applies fl, the failure decided for f, to f's delivery: one
	// update guarded on fl's transition's From. Reports whether it
	// changed the delivery.
	Fail(ctx context.Context, f store.Failing, fl store.Failure, now time.Time) (bool, error)
	// RecordEvents appends entries to the audit trail.
	RecordEvents(ctx context.Context, events []store.DeliveryEvent) error
	// Wake tells the host's waiting heartbeats, on any replica, once the
	// transaction commits, that a delivery of its is due at once.
	Wake(ctx context.Context, hostID string) error
}

// ReportSteps are the steps of a host's report (store.DeliveryReport) in
// an engine's SQL, in one transaction — or on the engine's pool, for a
// report that OneStep says takes one.
type ReportSteps interface {
	FailureSteps
	// Ack acks p's deliveries that TransitionAck allows and records
	// results, the host's reported results of deliveries among p.IDs
	// (those acked, and any acked before). Returns how many it acked.
	Ack(ctx context.Context, p *store.DeliveryAckParams, results []store.DeliveryResult) (int, error)
	// Extend extends the leases of p's deliveries that TransitionExtend
	// allows. Returns how many.
	Extend(ctx context.Context, p *store.DeliveryExtendParams) (int, error)
	// Transitionable locks and returns the host's deliveries among ids
	// whose status tr allows, in id order.
	Transitionable(ctx context.Context, tr store.Transition, hostID string, ids []string) ([]store.Failing, error)
	// Unheld locks and returns the host's leased deliveries (those
	// TransitionAnswerLost allows) not among held, in id order.
	Unheld(ctx context.Context, hostID string, held []string) ([]store.Failing, error)
	// RecordResults keeps the results a host reported of its own
	// deliveries, each replacing the one before.
	RecordResults(ctx context.Context, hostID string, results []store.DeliveryResult) error
}

// Report applies a host's report in the order every engine applies it:
// its acks (with the results of the deliveries they name), its nacks, its
// extends, the release of the leased deliveries the host no longer holds,
// then the rest of its results.
func Report(ctx context.Context, tx ReportSteps, p *store.DeliveryReportParams) (*store.DeliveryReportResult, error) {
	var res store.DeliveryReportResult
	var err error
	rest := p.Results
	if p.Ack != nil {
		var acked []store.DeliveryResult
		acked, rest = splitResults(p.Ack.IDs, p.Results)
		if res.Acked, err = tx.Ack(ctx, p.Ack, acked); err != nil {
			return nil, err
		}
	}
	if p.Nack != nil {
		if res.Nacked, err = Nack(ctx, tx, p.Nack); err != nil {
			return nil, err
		}
	}
	if p.Extend != nil {
		if res.Extended, err = tx.Extend(ctx, p.Extend); err != nil {
			return nil, err
		}
	}
	if p.ReleaseUnheld != nil {
		if res.Released, err = ReleaseUnheld(ctx, tx, p.ReleaseUnheld); err != nil {
			return nil, err
		}
	}
	if len(rest) > 0 {
		if err := tx.RecordResults(ctx, p.HostID, rest); err != nil {
			return nil, err
		}
	}
	return &res, nil
}

// OneStep says whether Report takes a single step of p: acks alone, with
// no results but theirs, or extends alone, with none. An engine whose
// steps are single statements may run such a report without a transaction
// of its own.
func OneStep(p *store.DeliveryReportParams) bool {
	switch {
	case p.Nack != nil || p.ReleaseUnheld != nil:
		return false
	case p.Ack != nil && p.Extend == nil:
		_, rest := splitResults(p.Ack.IDs, p.Results)
		return len(rest) == 0
	case p.Ack == nil && p.Extend != nil:
		return len(p.Results) == 0
	}
	return false
}

// splitResults parts results into those of deliveries among ids and the
// others, each in its order.
func splitResults(ids []string, results []store.DeliveryResult) (of, others []store.DeliveryResult) {
	if len(results) == 0 {
		return nil, nil
	}
	among := make(map[string]bool, len(ids))
	for _, id := range ids {
		among[id] = true
	}
	for _, r := range results {
		if among[r.DeliveryID] {
			of = append(of, r)
		} else {
			others = append(others, r)
		}
	}
	return of, others
}

// Nack fails the host's deliveries p names that TransitionNack allows, as
// p.Fail decides.
func Nack(ctx context.Context, tx ReportSteps, p *store.DeliveryNackParams) (int, error) {
	return failAllowed(ctx, tx, store.TransitionNack, p.HostID, p.IDs, p.Fail, p.Now)
}

// Release fails the host's deliveries p names that TransitionRelease
// allows, as p.Fail decides.
func Release(ctx context.Context, tx ReportSteps, p *store.DeliveryReleaseParams) (int, error) {
	return failAllowed(ctx, tx, store.TransitionRelease, p.HostID, p.IDs, p.Fail, p.Now)
}

// failAllowed fails the host's deliveries among ids that t allows, as fail
// decides.
func failAllowed(ctx context.Context, tx ReportSteps, t store.Transition, hostID string, ids []string, fail store.FailFunc, now time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	failing, err := tx.Transitionable(ctx, t, hostID, ids)
	if err != nil {
		return 0, err
	}
	return ApplyFailures(ctx, tx, failing, fail, now)
}

// ReleaseUnheld fails the host's leased deliveries not in p.Held, as
// p.Fail decides.
func ReleaseUnheld(ctx context.Context, tx ReportSteps, p *store.DeliveryReleaseUnheldParams) (int, error) {
	failing, err := tx.Unheld(ctx, p.HostID, p.Held)
	if err != nil {
		return 0, err
	}
	return ApplyFailures(ctx, tx, failing, p.Fail, p.Now)
}

// ApplyFailures applies to each of the locked deliveries failing the
// Failure fail decides: one update guarded on its transition's From, and
// its audit event. A delivery due again at once, or handed to another
// member, wakes its holder, once per host. It returns how many
// changed.
func ApplyFailures(ctx context.Context, tx FailureSteps, failing []store.Failing, fail store.FailFunc, now time.Time) (int, error) {
	now = now.Truncate(time.Millisecond).UTC() // the precision both engines keep
	n := 0
	woken := map[string]bool{}
	for _, f := range failing {
		fl, ok := fail(f)
		if !ok {
			continue
		}
		changed, err := tx.Fail(ctx, f, fl, now)
		if err != nil {
			return 0, err
		}
		if !changed {
			continue
		}
		err = tx.RecordEvents(ctx, []store.DeliveryEvent{{
			DeliveryID: f.ID, At: now, From: f.Status, To: fl.To, Reason: fl.Reason, Attempt: f.Attempts,
		}})
		if err != nil {
			return 0, err
		}
		holder := f.HostID
		if fl.MoveTo != "" {
			holder = fl.MoveTo
		}
		if wakes(fl) && !woken[holder] {
			woken[holder] = true
			if err := tx.Wake(ctx, holder); err != nil {
				return 0, err
			}
		}
		n++
	}
	return n, nil
}

// wakes reports whether a failure wakes its delivery's holder: due again
// at once (an AtOnce transition), or handed to another member, whose
// connections learn of it (and of when it comes due) only so.
func wakes(fl store.Failure) bool {
	return fl.Transition.AtOnce || (fl.MoveTo != "" && fl.To == store.StatusRetrying)
}
