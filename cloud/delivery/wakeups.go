package delivery

import (
	"context"
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
	parked       map[string]*poll          // host id → its answered poll, parked (park.go)
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

// HostStopping answers at once the host's long polls, with what was
// already leased to them and nothing more: the host is stopping, and reads
// their answers to hand back what they carry, where hanging up on them
// would cost their deliveries an attempt no handler used. Those on this
// replica end now, those on others when the store's listener tells them
// (store.HostStopping); one whose replica does not hear of it answers as
// ever, when work arrives or its wait ends.
func (s *Service) HostStopping(ctx context.Context, hostID string) {
	s.endPolls(hostID)
	s.giveBackParked(hostID, nil)
	if err := s.store.HostStopping(context.WithoutCancel(ctx), hostID); err != nil {
		s.log.Warn("tell other replicas a host is stopping", "host", hostID, "err", err)
	}
}

// endPolls answers the host's long polls waiting on this replica at once.
func (s *Service) endPolls(hostID string) { s.eachPoll(hostID, (*poll).end) }

// eachPoll calls fn on each of hostID's polls waiting on this replica.
func (s *Service) eachPoll(hostID string, fn func(*poll)) {
	w := s.wakeups
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.polls[hostID] {
		fn(p)
	}
}

// reservePoll holds room for one delivery of hostID, of size body bytes,
// on one of its long polls waiting on this replica with nothing found; nil
// when there is none or the service stops waiting.
func (s *Service) reservePoll(hostID string, size int) *Reservation {
	w := s.wakeups
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	for p := range w.polls[hostID] {
		if v := p.reserve(s.cfg.LeaseFor, size); v != nil {
			return v
		}
	}
	return nil
}

// pendingPolls tells hostID's polls waiting here that a delivery of the
// host was stored pending.
func (s *Service) pendingPolls(hostID string) { s.eachPoll(hostID, (*poll).pending) }

// Subscribe returns a channel that receives when the host may have work
// (deliveries became available to it at once) or the host changed, and its
// cancel. A receive
// is a hint: look with Lease. The channel holds one wake-up; more while it
// is full are merged.
func (s *Service) Subscribe(hostID string) (<-chan struct{}, func()) {
	w := s.wakeups
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting[hostID] == nil {
		w.waiting[hostID] = map[chan struct{}]bool{}
	}
	w.waiting[hostID][ch] = true
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waiting[hostID], ch)
		if len(w.waiting[hostID]) == 0 {
			delete(w.waiting, hostID)
		}
	}
}

// Waiting is how many subscriptions are open, over every host.
func (s *Service) Waiting() int {
	s.wakeups.mu.Lock()
	defer s.wakeups.mu.Unlock()
	n := 0
	for _, chs := range s.wakeups.waiting {
		n += len(chs)
	}
	return n
}

// StopWaiting ends every wait at once, and every later one without
// waiting: for a graceful shutdown. Stopping is what Stopping's channel
// says.
func (s *Service) StopWaiting() {
	s.wakeups.mu.Lock()
	if !s.wakeups.stopped {
		s.wakeups.stopped = true
		close(s.wakeups.stop)
	}
	s.wakeups.mu.Unlock()
	// No poll comes for what parked polls hold, nor for the marks put off.
	s.giveBackAllParked()
	s.flushPollMarks()
}

// Stopping is closed once StopWaiting was called.
func (s *Service) Stopping() <-chan struct{} { return s.wakeups.stop }

// Ready is closed once the store's listener first listens (Listen).
func (s *Service) Ready() <-chan struct{} { return s.wakeups.ready }

// OnSocket sets what Listen tells of hosts' sockets opening and closing in
// any replica (Connections.Observe). Call it before Listen.
func (s *Service) OnSocket(fn func(store.SocketEvent)) { s.wakeups.socket = fn }

// OnIPSetChanged sets what Listen tells of named IP sets stored anew in any
// replica (store.DeliveryListenParams.IPSetChanged). Call it before Listen.
func (s *Service) OnIPSetChanged(fn func(name string)) { s.wakeups.ipSetChanged = fn }

// Listen feeds subscribers from the store's listener until ctx ends,
// listening again a second after a failure. listening, when set, is called
// each time the listener is in place (changes made while no one listened
// went untold); changed, when set, with the id of a host whose settings
// changed (store.DeliveryListenParams.Changed).
func (s *Service) Listen(ctx context.Context, listening func(), changed func(hostID string)) {
	for {
		err := s.store.DeliveryListen(ctx, &store.DeliveryListenParams{
			Listening: func() {
				if listening != nil {
					listening()
				}
				s.wakeups.once.Do(func() { close(s.wakeups.ready) })
			},
			Available:    s.wakeups.wake,
			Socket:       s.wakeups.socket,
			IPSetChanged: s.wakeups.ipSetChanged,
			// A host that is stopping has its polls answered, on every
			// replica (HostStopping).
			Stopping: s.endPolls,
			// A host that changed (deactivated, re-claimed) wakes its
			// subscribers too: a pushing connection looks at the host
			// again and closes if it is gone.
			Changed: func(hostID string) {
				if changed != nil {
					changed(hostID)
				}
				s.wakeups.wake(hostID)
			},
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("delivery listener failed; waiting heartbeats fall back to their timeout", "err", err)
		t := s.clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}
