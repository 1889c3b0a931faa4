package delivery

import (
	"sync"

	"github.com/relaykit/relay/cloud/store"
)

// room is what a holder (an Outbox, a waiting poll) holds for the intake:
// the reservations not yet settled and the deliveries stored leased to it,
// not yet taken, with their bodies' bytes, which stay within a lease's
// batch bytes (Config.MaxBatchBytes) unless it holds none: one larger body
// still goes, alone, as a lease takes its first delivery whatever its size.
// Its holder's mutex guards it.
type room struct {
	maxBytes int64
	settled  *sync.Cond // reserved fell
	reserved int        // reservations the intake holds for inserts not yet settled
	bytes    int64      // body bytes reserved and handed in, not yet taken
	handed   []*store.Delivery
}

func newRoom(mu *sync.Mutex, maxBytes int) room {
	return room{maxBytes: int64(maxBytes), settled: sync.NewCond(mu)}
}

// reserve holds room for a body of size bytes, unless it would pass the
// batch's bytes.
func (r *room) reserve(size int) bool {
	if r.bytes > 0 && r.bytes+int64(size) > r.maxBytes {
		return false
	}
	r.reserved++
	r.bytes += int64(size)
	return true
}

// settle ends a reservation of size bytes: d, when not nil, was stored
// leased to the holder and is handed in.
func (r *room) settle(d *store.Delivery, size int) {
	r.reserved--
	r.bytes -= int64(size)
	if d != nil {
		r.handed = append(r.handed, d)
		r.bytes += int64(len(d.RawBody))
	}
	r.settled.Broadcast()
}

// waitSettled waits until no reservation is left (the group commit bounds
// the wait); the holder's mutex is held.
func (r *room) waitSettled() {
	for r.reserved > 0 {
		r.settled.Wait()
	}
}

// take returns what was handed in and holds it no longer.
func (r *room) take() []*store.Delivery {
	ds := r.handed
	r.handed = nil
	for _, d := range ds {
		r.bytes -= int64(len(d.RawBody))
	}
	return ds
}
