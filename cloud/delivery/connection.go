package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared/steptime"
)

// Lost fails the attempt of deliveries pushed on a connection that closed
// before the host reported them (TransitionConnectionLost): due again at
// once, for the host's next connection or heartbeat. Deliveries the host
// reported meanwhile, or that are no longer leased, are left alone. It is
// recorded even when ctx was canceled (the connection is gone), and returns
// how many changed.
func (s *Service) Lost(ctx context.Context, hostID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ctx = context.WithoutCancel(ctx)
	n, err := s.store.DeliveryNack(ctx, ConnectionLostParams(hostID, ids, s.cfg.Policy, s.now()))
	if err != nil {
		return 0, fmt.Errorf("connection lost: %w", err)
	}
	if n > 0 {
		s.log.Info("socket closed with deliveries unreported; they are due again", "host", hostID, "deliveries", n)
	}
	return n, nil
}

// Errors of Next.
var (
	// ErrHostGone: the host was deactivated or re-claimed (its generation
	// moved on); its connection must close.
	ErrHostGone = errors.New("host deactivated or re-claimed")
	// ErrStopping: the service stops waiting (StopWaiting); connections
	// close so that hosts go to another replica.
	ErrStopping = errors.New("cloud stopping")
)

// Next leases the next batch of a connection that pushes deliveries as they
// come: at most room() of them (none while it is 0), oldest first, waiting
// as long as ctx lasts for work — a delivery arriving for the host, its
// earliest retry coming due, or more room (poke: room may have grown, or a
// report moved a retry). Unlike a heartbeat's wait, an idle connection
// costs no query until one of those happens. It returns ErrHostGone when
// the host was deactivated or re-claimed meanwhile, ErrStopping once the
// service stops waiting, ctx's error when it ends, else the store's,
// wrapped.
func (s *Service) Next(ctx context.Context, host *store.Host, room func() int, poke <-chan struct{}) (*store.DeliveryLeaseResult, error) {
	// Listening before looking: work arriving in between still wakes it.
	wake, unsubscribe := s.Subscribe(host.ID)
	defer unsubscribe()
	var retry clockwork.Timer // the earliest retry coming due
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	look := true // lease, and find the next retry, before waiting
	// woken: a wake-up, or the first look — a host that changed before
	// the subscription is caught there — so the host is looked at too
	// when there is nothing to lease.
	woken := true
	var notifiedAt, wokenAt time.Time // the last wake-up's (steptime)
	for {
		if n := room(); n > 0 && look {
			p := &store.DeliveryLeaseParams{HostID: host.ID, Max: n, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: s.now()}
			began := steptime.Now()
			res, err := s.store.DeliveryLease(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("lease: %w", err)
			}
			if len(res.Deliveries) > 0 {
				// Each push is an exchange with the host, as a heartbeat is.
				if s.cfg.Observer != nil {
					s.cfg.Observer.Exchanged(host.ID)
				}
				s.observeLeased(ctx, host.ID, res.Deliveries)
				stamp(notifiedAt, wokenAt, began, res.Deliveries)
				return res, nil
			}
			next, err := s.store.DeliveryNextRetryAt(ctx, host.ID)
			if err != nil {
				return nil, fmt.Errorf("next retry: %w", err)
			}
			if retry != nil {
				retry.Stop()
				retry = nil
			}
			if next != nil {
				retry = s.clock.NewTimer(max(next.Sub(p.Now), time.Millisecond))
			}
		}
		if woken {
			// Nothing to push (or no room): the wake-up may say the host
			// is gone.
			if err := s.stillActive(ctx, host); err != nil {
				return nil, err
			}
		}
		look, woken = false, false
		var due <-chan time.Time
		if retry != nil {
			due = retry.Chan()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wakeups.stop:
			return nil, ErrStopping
		case <-poke:
			look = true
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-due:
			retry = nil
			look = true
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-wake:
			look, woken = true, true
			notifiedAt, wokenAt = s.wakeups.notifiedAt(host.ID), steptime.Now()
		}
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
