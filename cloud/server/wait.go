package server

import (
	"context"
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// wakeups lets heartbeats that asked to wait (wait_s) sleep until work for
// their host arrives. The store's listener feeds it: in process on SQLite,
// through LISTEN/NOTIFY across replicas on Postgres.
type wakeups struct {
	mu      sync.Mutex
	waiting map[string]map[chan struct{}]bool // host id → waiting heartbeats
	stop    chan struct{}                     // closed when the server stops waiting
	stopped bool
	ready   chan struct{} // closed once the store's listener first listens
	once    sync.Once
}

func newWakeups() *wakeups {
	return &wakeups{waiting: map[string]map[chan struct{}]bool{}, stop: make(chan struct{}), ready: make(chan struct{})}
}

// subscribe returns a channel that receives when the host may have work,
// and its cancel.
func (w *wakeups) subscribe(hostID string) (<-chan struct{}, func()) {
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

// wake tells the host's waiting heartbeats to look for work. It never
// blocks.
func (w *wakeups) wake(hostID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiting[hostID] {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
	}
}

// StopWaiting answers every waiting heartbeat at once, and every later one
// without waiting: for a graceful shutdown (http.Server.RegisterOnShutdown).
func (s *Server) StopWaiting() {
	s.wakeups.mu.Lock()
	defer s.wakeups.mu.Unlock()
	if !s.wakeups.stopped {
		s.wakeups.stopped = true
		close(s.wakeups.stop)
	}
}

// RunWakeups feeds waiting heartbeats from the store's listener until ctx
// ends, listening again a second after a failure.
func (s *Server) RunWakeups(ctx context.Context) {
	for {
		err := s.store.DeliveryListen(ctx, &store.DeliveryListenParams{
			Listening: func() {
				// Changes made while no one listened went untold.
				s.targets.reset()
				s.wakeups.once.Do(func() { close(s.wakeups.ready) })
			},
			Available: s.wakeups.wake,
			Changed:   s.targets.drop,
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

// awaitWork holds a heartbeat that found nothing to lease until the host
// has work, up to wait: it wakes when a delivery arrives for the host (wake)
// and when its earliest retry comes due, then leases again. A client that
// goes away gets nothing leased.
// A host deactivated or re-claimed while it waits (its generation moved on)
// is handed nothing.
func (s *Server) awaitWork(ctx context.Context, p *store.DeliveryLeaseParams, generation int64, wait time.Duration, wake <-chan struct{}) (*store.DeliveryLeaseResult, error) {
	deadline := p.Now.Add(wait)
	due, err := s.store.DeliveryNextRetryAt(ctx, p.HostID)
	if err != nil {
		return nil, err
	}
	if due != nil && due.Before(deadline) {
		deadline = *due
	}
	t := s.clock.NewTimer(deadline.Sub(p.Now))
	defer t.Stop()
	for {
		final := false
		select {
		case <-ctx.Done():
			return &store.DeliveryLeaseResult{}, nil
		case <-s.wakeups.stop:
			final = true
		case <-t.Chan():
			final = true
		case <-wake:
		}
		h, err := s.store.HostGet(ctx, p.HostID)
		if err != nil {
			return nil, err
		}
		if h.Status != store.HostActive || h.Generation != generation {
			return &store.DeliveryLeaseResult{}, nil
		}
		p.Now = s.now()
		res, err := s.store.DeliveryLease(ctx, p)
		if err != nil || final || len(res.Deliveries) > 0 {
			return res, err
		}
	}
}
