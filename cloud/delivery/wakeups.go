package delivery

import (
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared/steptime"
)

// wakeups lets those waiting for a host's work (a long poll's wait, a
// pushed connection) sleep until it arrives. The store's listener feeds
// it: in process on SQLite, through LISTEN/NOTIFY across replicas on
// Postgres.
type wakeups struct {
	mu           sync.Mutex
	waiting      map[string]map[chan struct{}]bool // host id → waiting subscribers
	stop         chan struct{}                     // closed when the service stops waiting
	stopped      bool
	ready        chan struct{} // closed once the store's listener first listens
	once         sync.Once
	socket       func(store.SocketEvent)   // OnSocket's
	ipSetChanged func(name string)         // OnIPSetChanged's
	polls        map[string]map[*poll]bool // host id → its long polls (watch)
	// notified is when each host was last woken, kept only while
	// steptime stamps (the benchmark's latency breakdown).
	notified map[string]time.Time
}

func newWakeups() *wakeups {
	return &wakeups{waiting: map[string]map[chan struct{}]bool{}, stop: make(chan struct{}), ready: make(chan struct{})}
}

// wake tells the host's subscribers to look for work. It never blocks.
func (w *wakeups) wake(hostID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if steptime.Enabled() && len(w.waiting[hostID]) > 0 {
		if w.notified == nil {
			w.notified = map[string]time.Time{}
		}
		w.notified[hostID] = time.Now()
	}
	for ch := range w.waiting[hostID] {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
	}
}

// notifiedAt is when the host was last woken, when steptime stamps (else
// the zero time): read by a waiter as it wakes, since a later wake-up
// moves it on.
func (w *wakeups) notifiedAt(hostID string) time.Time {
	if !steptime.Enabled() {
		return time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notified[hostID]
}

// stamp stamps leased deliveries, when steptime stamps: when their host
// was woken (notified, read as the waiter woke) and when its waiter
// received that (woken; both zero when it did not wait: the lease is the
// first look of a push or heartbeat), when the lease began and now, when
// it committed.
func stamp(notified, woken, began time.Time, ds []*store.Delivery) {
	if !steptime.Enabled() {
		return
	}
	now := time.Now()
	for _, d := range ds {
		steptime.Stamp(d.Headers, "notified", notified)
		steptime.Stamp(d.Headers, "woken", woken)
		steptime.Stamp(d.Headers, "lease_began", began)
		steptime.Stamp(d.Headers, "leased", now)
	}
}

// watch makes p one of the host's polls the intake may reserve room on;
// it returns its end.
func (w *wakeups) watch(hostID string, p *poll) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls == nil {
		w.polls = map[string]map[*poll]bool{}
	}
	if w.polls[hostID] == nil {
		w.polls[hostID] = map[*poll]bool{}
	}
	w.polls[hostID][p] = true
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.polls[hostID], p)
		if len(w.polls[hostID]) == 0 {
			delete(w.polls, hostID)
		}
	}
}
