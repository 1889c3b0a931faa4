package sqlite

import (
	"context"
	"sync"

	"github.com/relaykit/relay/cloud/store"
)

// listeners are the callbacks of running DeliveryListen calls.
type listeners struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(hostID string)
}

func newListeners() listeners { return listeners{fns: map[int]func(string){}} }

func (l *listeners) add(fn func(string)) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	l.fns[id] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fns, id)
	}
}

func (l *listeners) notify(hostID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, fn := range l.fns {
		fn(hostID)
	}
}

func (s *Store) DeliveryListen(ctx context.Context, p *store.DeliveryListenParams) error {
	remove := s.wake.add(p.Available)
	defer remove()
	if p.Changed != nil {
		removeChanged := s.changed.add(p.Changed)
		defer removeChanged()
	}
	if p.Socket != nil {
		removeSocket := s.sockets.listen(p.Socket)
		defer removeSocket()
	}
	if p.Stopping != nil {
		removeStopping := s.stopping.add(p.Stopping)
		defer removeStopping()
	}
	if p.IPSetChanged != nil {
		removeIPSets := s.ipsets.add(p.IPSetChanged)
		defer removeIPSets()
	}
	if p.Listening != nil {
		p.Listening()
	}
	<-ctx.Done()
	return nil
}

func (s *Store) HostStopping(ctx context.Context, hostID string) error {
	s.stopping.notify(hostID)
	return nil
}
