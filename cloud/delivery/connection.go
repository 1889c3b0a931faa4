package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// SocketStore records hosts' sockets across replicas (a store.Store has
// it).
type SocketStore interface {
	SocketOpen(ctx context.Context, hostID string) (*store.SocketOpenResult, error)
	SocketClose(ctx context.Context, hostID string, epoch int64) error
}

// ErrReplaced: a newer connection of the host took over before this one
// was in place; it must close.
var ErrReplaced = errors.New("replaced by a newer connection of the host")

// Connections keeps one live connection per host, across replicas. On
// this replica a new connection closes the host's older one and waits
// until it released what it carried; on the others, the store's epoch
// (SocketOpen: later means greater, whatever the clocks say) and its
// notifications (Observe) do the same: a replica holding a connection of
// the host with a smaller epoch than one announced closes it, and the new
// one waits for it to be told closed, as long as Takeover at most (the
// leases still hold what it carried). A notification that is missed (the
// listener was down) leaves the old connection to its pings: a host that
// went elsewhere answers none.
type Connections struct {
	store    SocketStore
	clock    clockwork.Clock
	log      *slog.Logger
	takeover time.Duration

	mu     sync.Mutex
	byHost map[string]*Connection
}

// Connection is a host's connection in Connections.
type Connection struct {
	hostID  string
	replace func()          // closes it: a newer connection took over
	done    <-chan struct{} // closed once what it carried is released
	outbox  *Outbox         // set by Attach: it pushes

	// Under Connections.mu.
	epoch    int64          // 0 until SocketOpen gave one
	newest   int64          // the greatest epoch announced while it had none
	replaced bool           // replace was called
	gone     bool           // Close was called
	waiting  bool           // it waits for the connection it replaces
	closed   map[int64]bool // epochs told closed while it waited
	told     chan struct{}  // receives when closed grew
}

// NewConnections returns an empty registry; takeover bounds the wait for
// an older connection of the host to close.
func NewConnections(st SocketStore, clock clockwork.Clock, log *slog.Logger, takeover time.Duration) *Connections {
	return &Connections{store: st, clock: clock, log: log, takeover: takeover, byHost: map[string]*Connection{}}
}

// Open makes a connection of hostID its one connection: replace closes it
// when a newer one takes over, done is closed once what it carried was
// released. Open returns once the older connection of the host, here or
// on another live replica, was closed and released (or Takeover passed);
// ErrReplaced when a newer one took over meanwhile (after that wait all
// the same), else the store's error, wrapped. Whatever it returns, call Close once what the
// connection carried was released.
func (r *Connections) Open(ctx context.Context, hostID string, replace func(), done <-chan struct{}) (*Connection, error) {
	c := &Connection{hostID: hostID, replace: replace, done: done, told: make(chan struct{}, 1)}
	r.mu.Lock()
	old := r.byHost[hostID]
	r.byHost[hostID] = c
	replaceOld := old != nil && !old.replaced
	if replaceOld {
		old.replaced = true
		select { // a waiting Open returns
		case old.told <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	if replaceOld {
		old.replace()
	}
	if old != nil {
		r.wait(ctx, old.done)
	}
	res, err := r.store.SocketOpen(ctx, hostID)
	if err != nil {
		return c, fmt.Errorf("connection open: %w", err)
	}
	r.mu.Lock()
	c.epoch = res.Epoch
	// A newer connection announced before this one had its epoch replaced
	// it all the same: it is told so like any other.
	replaceNow := !c.replaced && c.newest > c.epoch
	if replaceNow {
		c.replaced = true
	}
	superseded := c.replaced
	// One replaced here was waited for above.
	elsewhere := res.Replaced != 0 && (old == nil || old.epoch != res.Replaced)
	c.waiting = elsewhere
	r.mu.Unlock()
	if replaceNow {
		c.replace()
	}
	if !elsewhere {
		if superseded {
			return c, ErrReplaced
		}
		return c, nil
	}
	defer func() {
		r.mu.Lock()
		c.waiting, c.closed = false, nil
		r.mu.Unlock()
	}()
	// Even when a newer connection replaces this one meanwhile (ctx ends
	// then), it waits on: the newer one waits for this one to be told
	// closed, and so, through it, for the one this one replaces.
	t := r.clock.NewTimer(r.takeover)
	defer t.Stop()
	for {
		r.mu.Lock()
		closed, replaced := c.closed[res.Replaced], c.replaced
		r.mu.Unlock()
		if closed {
			if replaced {
				return c, ErrReplaced
			}
			return c, nil
		}
		select {
		case <-c.told:
		case <-t.Chan():
			r.log.Warn("the host's older socket, on another replica, was not told closed in time; its leases hold what it carried",
				"host", hostID, "epoch", res.Replaced, "waited", r.takeover)
			r.mu.Lock()
			replaced = c.replaced
			r.mu.Unlock()
			if replaced {
				return c, ErrReplaced
			}
			return c, nil
		}
	}
}

// wait waits until done is closed, Takeover passes or ctx ends.
func (r *Connections) wait(ctx context.Context, done <-chan struct{}) {
	t := r.clock.NewTimer(r.takeover)
	defer t.Stop()
	select {
	case <-done:
	case <-t.Chan():
	case <-ctx.Done():
	}
}

// Close forgets c and tells every replica that it closed. Call it once
// what c carried was released; calls after the first do nothing.
func (r *Connections) Close(c *Connection) {
	r.mu.Lock()
	if r.byHost[c.hostID] == c {
		delete(r.byHost, c.hostID)
	}
	epoch, gone := c.epoch, c.gone
	c.gone = true
	r.mu.Unlock()
	if epoch == 0 || gone {
		return
	}
	if err := r.store.SocketClose(context.Background(), c.hostID, epoch); err != nil {
		r.log.Warn("connection close not recorded; a newer connection of the host waits for it a while", "host", c.hostID, "err", err)
	}
}

// Attach says that c pushes from o: from now on the intake may lease to it
// (Reserve).
func (r *Connections) Attach(c *Connection, o *Outbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.outbox = o
}

// Reserve holds room for one delivery of hostID, of size body bytes, about
// to be stored, on the host's connection on this replica: one that pushes
// (Attach), is in place (not waiting for an older one to close, not
// replaced, not closed), whose host granted room, whose push loop is caught
// up and which holds room for bytes (see Outbox). It
// returns nil when there is none: the delivery is stored pending, and
// whichever replica holds the host's connection is woken to lease it.
func (r *Connections) Reserve(hostID string, size int) *Reservation {
	v, _ := r.reserve(hostID, size)
	return v
}

// reserve is Reserve, and whether the host has a connection on this
// replica at all.
func (r *Connections) reserve(hostID string, size int) (*Reservation, bool) {
	r.mu.Lock()
	c := r.byHost[hostID]
	var o *Outbox
	if c != nil && c.epoch != 0 && !c.replaced && !c.gone && !c.waiting {
		o = c.outbox
	}
	r.mu.Unlock()
	if o == nil {
		return nil, c != nil
	}
	// Closing the connection closes its outbox (Outbox.Close), which
	// refuses room from then on.
	return o.reserve(size), true
}

// pending tells hostID's connection on this replica, if any, that a
// delivery of the host was stored pending (Outbox.pending).
func (r *Connections) pending(hostID string) {
	if o := r.outbox(hostID); o != nil {
		o.pending()
	}
}

// outbox is the outbox hostID's connection on this replica pushes from,
// if any.
func (r *Connections) outbox(hostID string) *Outbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.byHost[hostID]; c != nil {
		return c.outbox
	}
	return nil
}

// Count is how many connections are open on this replica.
func (r *Connections) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byHost)
}

// Observe applies what the store's listener tells of hosts' connections in
// any replica (DeliveryListenParams.Socket): a newer connection of a host
// closes the one held here; a closed one ends the wait of the connection
// that replaces it. It never blocks.
func (r *Connections) Observe(e store.SocketEvent) {
	r.mu.Lock()
	c := r.byHost[e.HostID]
	if c == nil {
		r.mu.Unlock()
		return
	}
	replace := false
	switch {
	case !e.Open:
		if c.waiting || c.epoch == 0 {
			if c.closed == nil {
				c.closed = map[int64]bool{}
			}
			c.closed[e.Epoch] = true
			select {
			case c.told <- struct{}{}:
			default:
			}
		}
	case c.epoch == 0:
		c.newest = max(c.newest, e.Epoch)
	case c.epoch < e.Epoch && !c.replaced:
		c.replaced, replace = true, true
		select { // a waiting Open returns
		case c.told <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	if replace {
		c.replace()
	}
}
