package agent

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/relaykit/relay/shared"
)

// Flow control: how many webhooks the host can take. The lease window
// bounds the webhooks in flight (leased and not yet recorded); a transport
// asks for no more than the window leaves free, and extends the leases of
// those in flight in time. It knows nothing of how webhooks come in.
const (
	// queuePerWorker sets the smallest lease window: webhooks leased per
	// worker, running or waiting. While the cloud has more and the workers
	// run dry before the next batch arrives, the window doubles up to
	// maxWindow; it falls back once the backlog is gone.
	queuePerWorker = 8
	// maxWindow lets a full batch be leased while the one before it runs.
	maxWindow = 2 * shared.MaxMaxWebhooks
	// extendAfter: a lease of a webhook in flight is extended once the
	// cloud granted or extended it this long ago (or one heartbeat
	// interval, if shorter: a cloud with a short RELAY_LEASE goes with short
	// intervals), not on every one of the back-to-back heartbeats of a
	// drain. With busyInterval, a lease is extended at most
	// extendAfter+busyInterval after it was last renewed.
	extendAfter = 10 * time.Second
)

// flow holds the webhooks in flight and the lease window.
type flow struct {
	workers  int
	interval time.Duration // the host's heartbeat interval
	log      *slog.Logger

	mu sync.Mutex
	// renewEvery is how long after its last renewal a lease is extended.
	renewEvery time.Duration
	// busyEvery bounds the heartbeat interval while webhooks are in flight.
	busyEvery time.Duration
	// inFlight holds the webhooks leased and not yet recorded, with when
	// the cloud last granted or extended their lease.
	inFlight map[string]time.Time
	window   int // how many webhooks may be in flight at once
}

func newFlow(workers int, interval time.Duration, log *slog.Logger) *flow {
	return &flow{
		workers:    workers,
		interval:   interval,
		renewEvery: min(extendAfter, interval),
		busyEvery:  busyInterval,
		log:        log,
		inFlight:   make(map[string]time.Time),
		window:     workers * queuePerWorker,
	}
}

// admit takes leased webhooks into flight and returns those to start:
// webhooks already in flight are not started twice.
func (f *flow) admit(ws []shared.Webhook, now time.Time) []*shared.Webhook {
	fresh := make([]*shared.Webhook, 0, len(ws))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range ws {
		w := &ws[i]
		if _, dup := f.inFlight[w.DeliveryID]; dup {
			// The cloud handed it out again (its lease ran out): that is a
			// fresh lease on the run already under way.
			f.inFlight[w.DeliveryID] = now
			f.log.Debug("webhook already in flight; not started twice", "delivery_id", w.DeliveryID)
			continue
		}
		f.inFlight[w.DeliveryID] = now
		fresh = append(fresh, w)
	}
	return fresh
}

// notInFlight returns those of ws not in flight: pushed to a stopping
// host, they are handed back, while one in flight runs already.
func (f *flow) notInFlight(ws []shared.Webhook) []shared.Webhook {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []shared.Webhook
	for _, w := range ws {
		if _, ok := f.inFlight[w.DeliveryID]; !ok {
			out = append(out, w)
		}
	}
	return out
}

// release takes webhooks out of flight: recorded, or handed back.
func (f *flow) release(deliveryIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range deliveryIDs {
		delete(f.inFlight, id)
	}
}

// count returns the number of webhooks in flight.
func (f *flow) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inFlight)
}

// credit is what flow control says when a transport reports.
type credit struct {
	free    int      // room in the window (may be negative after it shrank)
	idle    bool     // nothing in flight
	extends []string // leases due for an extend, sorted
	held    []string // everything in flight, sorted (only when asked)
}

// credit returns, in one look, the room in the window and the leases due
// for an extend at now; with held, every webhook in flight as well.
func (f *flow) credit(now time.Time, held bool) credit {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c credit
	for id, renewed := range f.inFlight {
		// A clock that went back since says nothing of the lease's age:
		// extend it. (Go's monotonic clock never goes back; a clock with
		// none might.)
		if now.Sub(renewed) >= f.renewEvery || now.Before(renewed) {
			c.extends = append(c.extends, id)
		}
	}
	if held {
		c.held = slices.Sorted(maps.Keys(f.inFlight))
	}
	c.free = f.window - len(f.inFlight)
	c.idle = len(f.inFlight) == 0
	slices.Sort(c.extends)
	return c
}

// extended notes that the cloud extended the leases of ids at at.
func (f *flow) extended(ids []string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if _, ok := f.inFlight[id]; ok {
			f.inFlight[id] = at
		}
	}
}

// setLease takes the lease length the cloud says it grants (0: not said):
// leases are extended a quarter of it after their last renewal at the
// latest, and a busy host heartbeats at least that often, so an extend
// arrives with three quarters of the lease to spare, whatever either clock
// says (it is all timed on this host's monotonic clock).
func (f *flow) setLease(lease time.Duration) {
	if lease <= 0 {
		return
	}
	quarter := max(lease/4, time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewEvery = min(extendAfter, f.interval, quarter)
	f.busyEvery = min(busyInterval, quarter)
}

// busy bounds the heartbeat interval while webhooks are in flight.
func (f *flow) busy() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busyEvery
}

// adjust sizes the window after a lease: it grows while the cloud has more
// and the workers ran out of work while the lease was on its way (lease
// further ahead), and falls back once the cloud has nothing more.
func (f *flow) adjust(draining, ranDry, more bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case draining && ranDry:
		f.window = min(2*f.window, maxWindow)
	case !more:
		f.window = f.workers * queuePerWorker
	}
}

// roomForMore reports whether at least half the lease window (at most a
// full batch) is free.
func (f *flow) roomForMore() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.window-len(f.inFlight) >= max(1, min(f.window/2, shared.MaxMaxWebhooks))
}

// room is credit without the extends: the room in the window and whether
// nothing is in flight, in constant time (a socket asks after every
// outcome).
func (f *flow) room() credit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return credit{free: f.window - len(f.inFlight), idle: len(f.inFlight) == 0}
}

// windowSize is the lease window.
func (f *flow) windowSize() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.window
}

// renewPeriod is how long after its last renewal a lease is extended.
func (f *flow) renewPeriod() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewEvery
}
