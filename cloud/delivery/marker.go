package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// MarkAfter is how long a delivery written to a connection's host may stay
// delivering before its Marker marks it delivered on its own. Most are
// reported sooner (a host reports within a tenth of a second of a
// handler's end), and the report's ack records the mark with it: one
// change of the delivery's row instead of two. On Postgres each change is
// a new version of the row with an entry in each of its indexes; the
// separate mark was a quarter of a delivery's database work.
const MarkAfter = time.Second

// Marker marks delivered the deliveries a connection wrote to its host,
// off the push loop and put off by MarkAfter: the host's report of them
// usually comes first, and its ack then records the mark too (Report).
// What the report does not ack is marked before the report changes it, so
// that every delivery's audit trail is the same as a heartbeat's:
// delivering, delivered (at the time it was written), then acked or failed.
// Its methods are safe for concurrent use.
type Marker struct {
	s      *Service
	hostID string

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]time.Time // written, not yet marked: when
	order   []string             // pending's ids as written (some since taken)
	marking int                  // marks in flight
	takers  int                  // Take calls waiting for them (tests)
	timer   clockwork.Timer      // the next due mark, if armed
}

// Add says ids are being written to the host now (Drop takes them back if
// the write fails).
func (m *Marker) Add(ids []string) {
	if len(ids) == 0 {
		return
	}
	at := m.s.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.pending[id] = at
		m.order = append(m.order, id)
	}
	if m.timer == nil {
		m.timer = m.s.clock.AfterFunc(MarkAfter, m.due)
	}
}

// due marks what was written MarkAfter ago or more and is still pending,
// then arms the timer for the next.
func (m *Marker) due() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timer = nil
	cutoff := m.s.now().Add(-MarkAfter)
	var ids []string
	var at time.Time
	for len(m.order) > 0 {
		id := m.order[0]
		t, ok := m.pending[id]
		if ok && t.After(cutoff) {
			// Not due yet, and nor is anything written after it.
			m.timer = m.s.clock.AfterFunc(t.Sub(cutoff), m.due)
			break
		}
		m.order = m.order[1:]
		if ok {
			delete(m.pending, id)
			ids = append(ids, id)
			at = t
		}
	}
	if len(m.order) == 0 {
		m.order = nil // let the backing array go
	}
	m.mark(ids, at)
}

// mark marks ids delivered as of at (the last written of them). Callers
// hold m.mu, which it releases while the store works. A mark that fails is
// logged and left: the host's report moves those deliveries on all the
// same, and an unreported one's lease ends as if it were never written.
func (m *Marker) mark(ids []string, at time.Time) {
	if len(ids) == 0 {
		return
	}
	m.marking++
	m.mu.Unlock()
	_, err := m.s.store.DeliveryMarkDelivered(context.Background(), &store.DeliveryMarkDeliveredParams{HostID: m.hostID, IDs: ids, Now: at})
	if err != nil {
		m.s.log.Warn("mark delivered", "host", m.hostID, "deliveries", len(ids), "err", err)
	}
	m.mu.Lock()
	m.marking--
	m.cond.Broadcast()
}

// Take prepares a report of the host's: it waits for the marks in flight
// (they may hold the report's deliveries), takes the pending ones among
// acks out, to be recorded by the ack (Report.Unmarked), and marks the
// pending ones among others (what the report nacks or extends) first.
func (m *Marker) Take(acks, others []string) []store.Written {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.marking > 0 {
		m.takers++
		m.cond.Wait()
		m.takers--
	}
	var written []store.Written
	for _, id := range acks {
		if at, ok := m.pending[id]; ok {
			delete(m.pending, id)
			written = append(written, store.Written{ID: id, At: at})
		}
	}
	m.mark(m.takePending(others))
	return written
}

// NotPending returns those of ids whose mark it does not hold: not added,
// or already marked or taken by a report.
func (m *Marker) NotPending(ids []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := m.pending[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// Drop forgets ids: the write that carried them failed, so they are not
// to be marked.
func (m *Marker) Drop(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.pending, id)
	}
}

// Restore puts back what Take took for a report that failed: it is still
// to be marked.
func (m *Marker) Restore(written []store.Written) {
	if len(written) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range written {
		m.pending[w.ID] = w.At
		m.order = append(m.order, w.ID)
	}
	if m.timer == nil {
		m.timer = m.s.clock.AfterFunc(0, m.due)
	}
}

// Flush marks everything pending and waits for every mark in flight: the
// connection is closing, and what it carried is about to be released.
func (m *Marker) Flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.marking > 0 {
		m.cond.Wait()
	}
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	ids, last := m.takePending(m.order)
	m.order = nil
	m.mark(ids, last)
}

// takePending takes the pending ones among ids out, and returns them with
// the last of their write times. Callers hold m.mu.
func (m *Marker) takePending(ids []string) (taken []string, last time.Time) {
	for _, id := range ids {
		if at, ok := m.pending[id]; ok {
			delete(m.pending, id)
			taken = append(taken, id)
			if at.After(last) {
				last = at
			}
		}
	}
	return taken, last
}
