// Package sweep runs the cloud's background upkeep: it turns expired leases
// into failed attempts so their deliveries are retried or dead-lettered. The
// store's guarded updates make it safe to run on every replica at once.
package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// Sweeper expires leases on an interval.
type Sweeper struct {
	Store    store.Store
	Clock    clockwork.Clock
	Log      *slog.Logger
	Interval time.Duration // default 1 s
	Policy   store.RetryPolicy
}

// Run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Second
	}
	t := s.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			s.SweepOnce(ctx)
		}
	}
}

// SweepOnce expires every lease that has ended, in bounded batches.
func (s *Sweeper) SweepOnce(ctx context.Context) int {
	total := 0
	for ctx.Err() == nil {
		n, err := s.Store.DeliveryExpireLeases(ctx, &store.DeliveryExpireLeasesParams{
			Policy: s.Policy, Limit: 1000, Now: s.Clock.Now().UTC().Truncate(time.Millisecond),
		})
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Warn("expire leases", "err", err)
			}
			return total
		}
		total += n
		if n < 1000 {
			break
		}
	}
	if total > 0 {
		s.Log.Info("leases expired", "count", total)
	}
	return total
}
