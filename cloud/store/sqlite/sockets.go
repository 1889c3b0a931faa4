package sqlite

import (
	"context"
	"sync"

	"github.com/relaykit/relay/cloud/store"
)

// sockets is each host's open socket and the listeners told of them. On
// SQLite one process owns the database, so this is all of them; a restart
// forgets sockets that died with the process.
type sockets struct {
	mu        sync.Mutex
	epoch     int64
	open      map[string]int64 // host id → its socket's epoch
	next      int
	listeners map[int]func(store.SocketEvent)
}

func (ss *sockets) listen(fn func(store.SocketEvent)) (remove func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.listeners == nil {
		ss.listeners = map[int]func(store.SocketEvent){}
	}
	id := ss.next
	ss.next++
	ss.listeners[id] = fn
	return func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		delete(ss.listeners, id)
	}
}

// tell calls every listener; ss.mu is held, so that they hear events in
// the order they happened.
func (ss *sockets) tell(e store.SocketEvent) {
	for _, fn := range ss.listeners {
		fn(e)
	}
}

func (s *Store) SocketOpen(ctx context.Context, hostID string) (*store.SocketOpenResult, error) {
	ss := &s.sockets
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.open == nil {
		ss.open = map[string]int64{}
	}
	ss.epoch++
	res := &store.SocketOpenResult{Epoch: ss.epoch, Replaced: ss.open[hostID]}
	ss.open[hostID] = ss.epoch
	ss.tell(store.SocketEvent{HostID: hostID, Epoch: res.Epoch, Open: true})
	return res, nil
}

func (s *Store) SocketClose(ctx context.Context, hostID string, epoch int64) error {
	ss := &s.sockets
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.open[hostID] == epoch {
		delete(ss.open, hostID)
	}
	ss.tell(store.SocketEvent{HostID: hostID, Epoch: epoch})
	return nil
}
