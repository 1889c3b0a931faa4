package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// An answered long poll parks (park.go), and the mark of its answer waits
// for the ack of the host's next poll (pollmarks.go), only where that poll
// comes to the same replica. On embedded SQLite that is always so
// (Config.ParkPolls, DeferPollMarks). Replicas sharing a Postgres store
// take a roll call instead: each holds a lease of its own in the store,
// renewed every RollCallEvery for RollCallFor, and does both while it
// counts no other. A replica that starts does neither before its first
// count, and the others see it within RollCallEvery of that count; until
// they do, a webhook one of them holds for a host whose next poll went to
// the new replica waits out parkFor and is given back with its attempt, as
// when a host goes quiet: later, never lost or run twice; and an answer
// whose mark one of them put off, acked through the new replica, is
// recorded acked from delivering, with no delivered step in its audit
// trail. A replica that finds others makes every mark it put off at once.

// RollCallEvery is how often a replica renews its lease and counts the
// others; RollCallFor is how long its lease outlives a replica that stops
// without giving it back.
const (
	RollCallEvery  = 5 * time.Second
	RollCallFor    = 3 * RollCallEvery
	rollCallPrefix = "replica/"
)

// RollCallStore is the store's part of the roll call.
type RollCallStore interface {
	LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error)
	LeaseRelease(ctx context.Context, name, holder string) error
	LeasesHeld(ctx context.Context, prefix string, now time.Time) (int, error)
}

// RollCall keeps this replica's lease and tells the delivery core whether
// answered long polls may park.
type RollCall struct {
	store RollCallStore
	svc   *Service
	clock clockwork.Clock
	log   *slog.Logger
	name  string
	// counted is how many replicas the last call that read the store
	// counted (0 before one did).
	counted atomic.Int64
}

// NewRollCall returns the roll call of svc's replica over st.
func NewRollCall(st RollCallStore, svc *Service, clock clockwork.Clock, log *slog.Logger) *RollCall {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &RollCall{store: st, svc: svc, clock: clock, log: log, name: rollCallPrefix + hex.EncodeToString(b)}
}

// Run calls the roll at once, then every RollCallEvery until ctx ends, and
// then gives the replica's lease back (a replica that stopped is not
// counted).
func (r *RollCall) Run(ctx context.Context) {
	t := r.clock.NewTicker(RollCallEvery)
	defer t.Stop()
	for {
		r.Call(ctx)
		select {
		case <-ctx.Done():
			// A store that does not answer in time leaves the lease
			// to run out: the others count this replica RollCallFor
			// longer.
			leave, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollCallEvery)
			r.Leave(leave)
			cancel()
			return
		case <-t.Chan():
		}
	}
}

// Call renews this replica's lease and counts the replicas holding one:
// polls park while it is the only one. A store that cannot be read stops
// parking until the next call reads it.
func (r *RollCall) Call(ctx context.Context) {
	now := r.clock.Now()
	_, err := r.store.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: r.name, Holder: r.name, Until: now.Add(RollCallFor), Now: now})
	n := 0
	if err == nil {
		n, err = r.store.LeasesHeld(ctx, rollCallPrefix, now)
	}
	alone := err == nil && n == 1
	if err == nil {
		r.counted.Store(int64(n))
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("replica roll call", "err", err)
	}
	if was := r.svc.setAlone(alone); alone != was {
		if alone {
			r.log.Info("the only replica on the store: answered long polls park for their host's next poll")
		} else if err == nil {
			r.log.Info("other replicas share the store: answered long polls no longer park", "replicas", n)
		}
	}
}

// Counted is how many replicas, this one included, the last call that
// read the store counted (0 before one did).
func (r *RollCall) Counted() int { return int(r.counted.Load()) }

// Leave gives the replica's lease back, stops parking and makes every
// mark it put off.
func (r *RollCall) Leave(ctx context.Context) {
	r.svc.setAlone(false)
	if err := r.store.LeaseRelease(ctx, r.name, r.name); err != nil {
		r.log.Warn("replica roll call: give the lease back", "err", err)
	}
}
