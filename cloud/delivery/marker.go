package delivery

import (
	"context"
	"sync"
)

// Marker marks the deliveries a connection pushed delivered, off the push
// loop: the loop leases and writes its next batch while the last one's
// mark commits, and the pushes written while a mark commits are marked
// together by the next one (one transaction, one fsync, for many
// batches). Before anything else changes those deliveries on the
// connection's behalf — a report of their outcomes, their release when it
// closes — Flush waits for the marks pending, so that their audit trail is
// the same as a heartbeat's: delivering, delivered, then acked or failed.
// Its methods are safe for concurrent use.
type Marker struct {
	s      *Service
	hostID string

	mu      sync.Mutex
	cond    *sync.Cond
	pending []string
	running bool  // a goroutine marks
	added   int64 // deliveries added, ever
	marked  int64 // of those, how many the marks done so far covered
}

// NewMarker returns the marker of a connection of host.
func (s *Service) NewMarker(hostID string) *Marker {
	m := &Marker{s: s, hostID: hostID}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// Add marks ids delivered: their batch was written to the host.
func (m *Marker) Add(ids []string) {
	if len(ids) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending = append(m.pending, ids...)
	m.added += int64(len(ids))
	if !m.running {
		m.running = true
		go m.run()
	}
}

// run marks what is pending, batch after batch, until nothing is. A mark
// that fails is logged and left: the host's report moves those deliveries
// on all the same, and an unreported one's lease ends as if it were
// delivered.
func (m *Marker) run() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.pending) > 0 {
		ids, upTo := m.pending, m.added
		m.pending = nil
		m.mu.Unlock()
		if _, err := m.s.MarkDelivered(context.Background(), m.hostID, ids); err != nil {
			m.s.log.Warn("mark delivered", "host", m.hostID, "deliveries", len(ids), "err", err)
		}
		m.mu.Lock()
		m.marked = upTo
		m.cond.Broadcast()
	}
	m.running = false
}

// Flush waits until every delivery added before it is marked (not those
// added while it waits: a busy connection keeps adding, and its reports
// must not wait for its pushes to stop).
func (m *Marker) Flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushTo(m.added)
}

// flushTo waits until the first target deliveries added are marked.
// Callers hold m.mu.
func (m *Marker) flushTo(target int64) {
	for m.marked < target {
		m.cond.Wait()
	}
}
