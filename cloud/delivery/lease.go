package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
	"go.opentelemetry.io/otel/attribute"
)

// Lease leases the host's available deliveries, at most max of them and
// the configured bytes of body, oldest first. When none is available and
// wait is positive, it waits up to wait (at most MaxWait) for work: a
// delivery arriving for the host, or its earliest retry coming due. A
// caller whose ctx ends while it waits gets nothing leased; so does a host
// deactivated or re-claimed meanwhile (its generation moved on).
func (s *Service) Lease(ctx context.Context, host *store.Host, max int, wait time.Duration) (*store.DeliveryLeaseResult, error) {
	if max <= 0 {
		return &store.DeliveryLeaseResult{}, nil
	}
	// A host that asks to wait is listening before it looks, so that work
	// arriving in between still wakes it; while it waits having found
	// nothing, the intake may store a webhook leased to it (see poll).
	var pl *poll
	wait = min(wait, s.cfg.MaxWait)
	if wait > 0 {
		pl = s.openPoll(host.ID, max)
	}
	// What the intake stored leased to the host's last poll since it
	// answered (see park.go) is this answer, with no lease.
	held, clean := s.unpark(host.ID)
	if len(held) > 0 {
		s.answered(host.ID, pl, clean)
		s.observeLeased(ctx, host.ID, held)
		return &store.DeliveryLeaseResult{Deliveries: held}, nil
	}
	p := &store.DeliveryLeaseParams{HostID: host.ID, Via: store.ViaHeartbeat, Max: max, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: s.now()}
	var res *store.DeliveryLeaseResult
	var err error
	if clean && pl != nil {
		// The last poll's look found all there was, and nothing was
		// stored pending nor woke it since: this one waits at once,
		// open to the intake from the start, with no look of its own.
		res, err = s.await(ctx, p, host.Generation, wait, pl)
	} else {
		began := steptime.Now()
		res, err = s.store.DeliveryLease(ctx, p)
		if err == nil {
			stamp(time.Time{}, time.Time{}, began, res.Deliveries)
		}
		if err == nil && len(res.Deliveries) == 0 && pl != nil {
			res, err = s.await(ctx, p, host.Generation, wait, pl)
		}
	}
	if err != nil {
		s.endPoll(pl)
		return nil, fmt.Errorf("lease: %w", err)
	}
	if len(res.Deliveries) > 0 && ctx.Err() == nil {
		// Parked when it found all there was.
		s.answered(host.ID, pl, !res.More)
	} else {
		s.endPoll(pl)
	}
	s.observeLeased(ctx, host.ID, res.Deliveries)
	return res, nil
}

// observeLeased tells the observer and the tracer of a leased batch, for
// any transport.
func (s *Service) observeLeased(ctx context.Context, hostID string, ds []*store.Delivery) {
	if s.cfg.Observer != nil && len(ds) > 0 {
		s.cfg.Observer.Leased(ds)
	}
	if s.cfg.Tracer.Enabled() {
		for _, d := range ds {
			_, span, _ := s.cfg.Tracer.Start(ctx, "lease", d.Headers[shared.HeaderTraceParent],
				attribute.String("relay.delivery_id", d.ID), attribute.String("relay.host_id", hostID),
				attribute.Int("relay.attempt", d.Attempts))
			span.End()
		}
	}
}

// await holds a lease that found nothing until the host has work, up to
// wait: it wakes when a delivery arrives for the host (its poll's
// subscription) and when its earliest retry comes due, then leases again.
// Meanwhile the intake may store deliveries leased to it (pl): once those
// settled they are its answer, with no lease. When ctx ends (the host is
// gone) or the host was deactivated, what was handed to it is released, due
// again at once (Release: its answer was never written).
func (s *Service) await(ctx context.Context, p *store.DeliveryLeaseParams, generation int64, wait time.Duration, pl *poll) (*store.DeliveryLeaseResult, error) {
	deadline := p.Now.Add(wait)
	// Open to the intake before its next retry is looked up.
	pl.openEarly()
	due, err := s.store.DeliveryNextRetryAt(ctx, p.HostID)
	if err != nil {
		// What the intake stored leased to it meanwhile is answered, or
		// released when the host is gone.
		handed := pl.close()
		if ctx.Err() != nil {
			s.releaseHanded(ctx, p.HostID, handed)
			return &store.DeliveryLeaseResult{}, nil
		}
		if len(handed) > 0 {
			return &store.DeliveryLeaseResult{Deliveries: handed}, nil
		}
		return nil, err
	}
	if due != nil && due.Before(deadline) {
		deadline = *due
	}
	t := s.clock.NewTimer(deadline.Sub(p.Now))
	defer t.Stop()
	for {
		final, woken, ended := false, false, false
		var notifiedAt, wokenAt time.Time // steptime
		pl.setOpen()
		select {
		case <-ctx.Done():
		case <-s.wakeups.stop:
			final = true
		case <-t.Chan():
			final = true
		case <-pl.ended:
			ended = true
		case <-pl.ready:
		case <-pl.wake:
			woken = true
			notifiedAt, wokenAt = s.wakeups.notifiedAt(p.HostID), steptime.Now()
		}
		handed := pl.close()
		if ctx.Err() != nil {
			// The host hung up its poll: gone, as far as its groups go,
			// until it is heard from again.
			s.cfg.Groups.Gone(p.HostID)
			s.releaseHanded(ctx, p.HostID, handed)
			return &store.DeliveryLeaseResult{}, nil
		}
		if len(handed) > 0 && !woken {
			return &store.DeliveryLeaseResult{Deliveries: handed}, nil
		}
		h, err := s.store.HostGet(ctx, p.HostID)
		if err == nil && (h.Status != store.HostActive || h.Generation != generation) {
			s.releaseHanded(ctx, p.HostID, handed)
			return &store.DeliveryLeaseResult{}, nil
		}
		if len(handed) > 0 {
			// A failed look at the host leaves them to its answer all the
			// same: they were leased to it while it was active.
			return &store.DeliveryLeaseResult{Deliveries: handed}, nil
		}
		if ended {
			// Its host is stopping and reads this answer: nothing more.
			s.cfg.Groups.Gone(p.HostID)
			return &store.DeliveryLeaseResult{}, nil
		}
		if err != nil {
			return nil, err
		}
		p.Now = s.now()
		began := steptime.Now()
		res, err := s.store.DeliveryLease(ctx, p)
		if err == nil {
			stamp(notifiedAt, wokenAt, began, res.Deliveries)
		}
		if err != nil || final || len(res.Deliveries) > 0 {
			return res, err
		}
	}
}

// releaseHanded releases deliveries stored leased to a poll that will not
// answer with them: never written, due again at once (Release), whether or
// not ctx was canceled. A release that fails leaves them to their lease's
// expiry, which does the same.
func (s *Service) releaseHanded(ctx context.Context, hostID string, ds []*store.Delivery) {
	if len(ds) == 0 {
		return
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	if _, err := s.Release(context.WithoutCancel(ctx), hostID, ids); err != nil {
		s.log.Warn("release deliveries of an ended poll", "host", hostID, "err", err)
	}
}

// NextPush returns the next batch of a connection that pushes deliveries as
// they come: first what the intake leased to it as it was stored (see
// Outbox), else at most the outbox's room of the host's available
// deliveries (none while it is 0), leased oldest first, waiting as long as
// ctx lasts for work — a delivery arriving for the host or handed in, its
// earliest retry coming due, or more room (the outbox's poke: room may
// have grown, or a report moved a retry). Unlike a heartbeat's wait, an
// idle connection costs no query until one of those happens. It returns
// ErrHostGone when the host was deactivated or re-claimed meanwhile,
// ErrStopping once the service stops waiting, ctx's error when it ends,
// else the store's, wrapped.
func (s *Service) NextPush(ctx context.Context, host *store.Host, o *Outbox) (*store.DeliveryLeaseResult, error) {
	st := &o.loop
	// woken: a wake-up, or the first look — a host that changed before
	// the subscription is caught there — so the host is looked at too
	// when there is nothing to lease.
	woken := st.wake == nil
	if st.wake == nil {
		// Listening before looking: work arriving in between still wakes
		// it. The subscription lasts from call to call (until one ends in
		// an error, or the outbox closes): a wake-up while the caller
		// pushes is not lost, and a loop caught up need not look again.
		wake, unsubscribe := s.Subscribe(host.ID)
		st.wake = wake
		o.subscribed(wake, unsubscribe)
	}
	caughtUp := func(v bool) {
		st.caughtUp = v
		o.setCaughtUp(v)
	}
	end := func() {
		if st.retry != nil {
			st.retry.Stop()
		}
		*st = loopState{}
		o.unsubscribe()
	}
	// Lease, and find the next retry, before waiting — unless the last
	// look found nothing and nothing woke the loop since (st.caughtUp;
	// only then may the intake lease to it).
	look := woken || !st.caughtUp || o.takeRelook()
	if look {
		// A poke before the look is answered by it.
		select {
		case <-o.poke:
		default:
		}
		o.takeRelook()
	}
	var notifiedAt, wokenAt time.Time // the last wake-up's (steptime)
	for {
		if err := ctx.Err(); err != nil {
			// What was handed in stays: the connection's release takes it.
			end()
			return nil, err
		}
		if ds := o.take(); len(ds) > 0 {
			// Leased as they were stored: no lease here.
			if s.cfg.Observer != nil {
				s.cfg.Observer.Exchanged(host.ID)
			}
			s.observeLeased(ctx, host.ID, ds)
			return &store.DeliveryLeaseResult{Deliveries: ds}, nil
		}
		if n := o.Room(); n > 0 && look {
			p := &store.DeliveryLeaseParams{HostID: host.ID, Via: store.ViaSocket, Max: n, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: s.now()}
			began := steptime.Now()
			res, err := s.store.DeliveryLease(ctx, p)
			if err != nil {
				end()
				return nil, fmt.Errorf("lease: %w", err)
			}
			if len(res.Deliveries) > 0 {
				caughtUp(false) // there may be more: the next call looks
				o.took(len(res.Deliveries))
				// Each push is an exchange with the host, as a heartbeat is.
				if s.cfg.Observer != nil {
					s.cfg.Observer.Exchanged(host.ID)
				}
				s.observeLeased(ctx, host.ID, res.Deliveries)
				stamp(notifiedAt, wokenAt, began, res.Deliveries)
				return res, nil
			}
			caughtUp(true)
			next, err := s.store.DeliveryNextRetryAt(ctx, host.ID)
			if err != nil {
				end()
				return nil, fmt.Errorf("next retry: %w", err)
			}
			if st.retry != nil {
				st.retry.Stop()
				st.retry = nil
			}
			if next != nil {
				st.retry = s.clock.NewTimer(max(next.Sub(p.Now), time.Millisecond))
			}
		}
		if woken {
			// Nothing to push (or no room): the wake-up may say the host
			// is gone.
			if err := s.stillActive(ctx, host); err != nil {
				end()
				return nil, err
			}
		}
		look, woken = false, false
		var due <-chan time.Time
		if st.retry != nil {
			due = st.retry.Chan()
		}
		o.waiting(true)
		select {
		case <-ctx.Done():
			o.waiting(false)
			end()
			return nil, ctx.Err()
		case <-s.wakeups.stop:
			o.waiting(false)
			end()
			return nil, ErrStopping
		case <-o.poke:
			// More room, or something handed in (taken above), finds
			// nothing new to lease when the last look found nothing and
			// nothing woke the loop since; a Poke does.
			look = o.takeRelook() || !st.caughtUp
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-due:
			st.retry = nil
			look = true
			caughtUp(false)
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-st.wake:
			look, woken = true, true
			caughtUp(false)
			notifiedAt, wokenAt = s.wakeups.notifiedAt(host.ID), steptime.Now()
		}
		o.waiting(false)
	}
}

// stillActive returns ErrHostGone when host was deactivated or re-claimed.
func (s *Service) stillActive(ctx context.Context, host *store.Host) error {
	h, err := s.store.HostGet(ctx, host.ID)
	if errors.Is(err, store.ErrNotFound) {
		return ErrHostGone
	}
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if h.Status != store.HostActive || h.Generation != host.Generation {
		return ErrHostGone
	}
	return nil
}

// NewOutbox returns the outbox of a new connection, with no room until its
// host grants some.
func (s *Service) NewOutbox() *Outbox {
	o := &Outbox{leaseFor: s.cfg.LeaseFor, poke: make(chan struct{}, 1)}
	o.held = newRoom(&o.mu, s.cfg.MaxBatchBytes)
	return o
}

// NewMarker returns the marker of a connection of host.
func (s *Service) NewMarker(hostID string) *Marker {
	m := &Marker{s: s, hostID: hostID, pending: map[string]time.Time{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}
