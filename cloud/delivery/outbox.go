package delivery

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// Outbox is what a pushing connection may carry: the room its host granted
// (credit) and the deliveries leased to it as they were stored, which its
// push loop (NextPush) takes before it leases anything.
//
// A webhook stored for a host whose connection on this replica has room,
// and whose push loop is caught up (its last look found nothing to lease,
// and nothing woke it since), is stored already leased to that connection
// (Connections.Reserve, then Reservation.Settle): one transaction, the
// insert's, instead of an insert and then a lease. Only then: a connection
// catching up on a backlog leases it oldest first, and a new webhook does
// not jump it.
//
// What it holds for the push loop is bounded as a lease's batch is, in
// bytes too (see room).
//
// Its methods are safe for concurrent use.
type Outbox struct {
	leaseFor time.Duration
	// push orders the push loop's writes and HandingBack (see Push).
	push sync.Mutex
	poke chan struct{} // room grew, a delivery was handed in, or Poke

	mu     sync.Mutex
	limit  int64 // push while pushed+reserved < limit (received + credit)
	pushed int64 // handed to the push loop, ever
	held   room  // what the intake reserved and handed in
	// caughtUp: the push loop's last look found nothing to lease and
	// nothing woke it since (loopState's); wake is its subscription, whose
	// pending wake-up says something may have come since.
	caughtUp bool
	wake     <-chan struct{}
	waits    bool // the push loop waits for work (tests)
	// idle: the push loop waits with nothing to react to (Idle).
	idle   bool
	closed bool
	// stopping: its host handed a delivery back (HandingBack), so it is
	// stopping; no room from then on.
	stopping bool
	// relook: Poke asked the push loop to look again even when it had
	// found nothing to lease (more room alone does not).
	relook bool
	unsub  func() // ends the push loop's subscription

	loop loopState // NextPush's, from call to call
}

// loopState is what the push loop (NextPush) keeps from one call to the
// next. Only NextPush uses it, called by one goroutine at a time.
type loopState struct {
	wake     <-chan struct{} // its subscription to the host's wake-ups; nil: none
	retry    clockwork.Timer // the earliest retry coming due
	caughtUp bool            // the last look found nothing, and nothing woke it since
}

// ErrCredit: a host's credit is not one it can grant (the caller closes
// its connection).
var ErrCredit = errors.New("invalid credit")

// Grant applies the host's credit: it received that many deliveries of
// the connection and can take credit more. Credit never takes back room
// already granted.
func (o *Outbox) Grant(received int64, credit int) error {
	if credit < 0 || received < 0 {
		return fmt.Errorf("%w: credit and received must not be negative", ErrCredit)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if received > o.pushed {
		return fmt.Errorf("%w: received %d webhooks, %d were pushed", ErrCredit, received, o.pushed)
	}
	if l := received + int64(min(credit, shared.MaxSocketCredit)); l > o.limit {
		o.limit = l
	}
	o.nudge()
	return nil
}

// Room is how many more deliveries the host granted, less those the
// intake holds room for.
func (o *Outbox) Room() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.room()
}

func (o *Outbox) room() int {
	if o.stopping {
		return 0
	}
	return int(min(max(o.limit-o.pushed-int64(o.held.reserved), 0), shared.MaxSocketCredit))
}

// HandingBack says the host is stopping (Report.HostStops), so nothing
// more is leased to the connection, whatever room its credit left — else
// what it hands
// back, due again at once, would be pushed straight back to it, and the
// attempts of what is pushed after its last report lost when it closes.
// Call it before the report is applied.
func (o *Outbox) HandingBack() {
	o.push.Lock()
	defer o.push.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopping = true
}

// Push runs write, the push loop's write of a batch it leased, unless its
// host handed back what it held (HandingBack), and says whether it ran.
// HandingBack waits for a write under way, so a batch is written before
// the host's hand-back is applied (the host reads it before the report's
// confirm and hands it back with the rest) or not at all: written after,
// it would reach a host that no longer reports, and its closing socket
// would spend an attempt no handler used (see Service.HandBackUnpushed).
func (o *Outbox) Push(write func()) bool {
	o.push.Lock()
	defer o.push.Unlock()
	o.mu.Lock()
	stopping := o.stopping
	o.mu.Unlock()
	if stopping {
		return false
	}
	write()
	return true
}

// Poke makes the push loop look again, even when its last look found
// nothing (e.g. a nack moved a retry before the one it waits for). It never
// blocks.
func (o *Outbox) Poke() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.relook = true
	o.nudge()
}

// nudge wakes the push loop: room grew, or a delivery was handed in. A
// loop that found nothing to lease and was not woken since makes no query
// for it. o.mu is held.
func (o *Outbox) nudge() {
	o.idle = false
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

// Idle says whether the push loop waits with nothing to react to: no poke
// (room, a hand-in, Poke) since it began to wait, and no wake-up of the
// host's pending then. A wake-up that comes later, or a retry coming due,
// is not seen here (wait on what it leads to). Tests wait on it, not on
// time, to know that the loop made its decision and nothing more happens
// until something does.
func (o *Outbox) Idle() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.idle
}

// Closing says whether Close waits for the inserts that hold room (for
// tests, as Idle).
func (o *Outbox) Closing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed && o.held.reserved > 0
}

// subscribed records the push loop's subscription.
func (o *Outbox) subscribed(wake <-chan struct{}, unsubscribe func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.wake, o.unsub = wake, unsubscribe
}

// unsubscribe ends the push loop's subscription, if it has one.
func (o *Outbox) unsubscribe() {
	o.mu.Lock()
	f := o.unsub
	o.unsub, o.wake, o.caughtUp = nil, nil, false
	o.mu.Unlock()
	if f != nil {
		f()
	}
}

// takeRelook says whether Poke was called since it was last asked.
func (o *Outbox) takeRelook() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.relook
	o.relook = false
	return r
}

// Close refuses room to the intake from now on, ends the push loop's
// subscription, waits until every insert that holds some settled, and
// returns the ids of the deliveries handed in
// and not taken by the push loop: leased to the connection and never
// written, to be released with what it carried. Calls after the first
// return none.
func (o *Outbox) Close() []string {
	defer o.unsubscribe() // the push loop is done
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.held.waitSettled()
	handed := o.held.take()
	ids := make([]string, len(handed))
	for i, d := range handed {
		ids[i] = d.ID
	}
	return ids
}

// reserve holds room for one delivery of size body bytes about to be
// stored; nil when there is none (credit, or bytes: see Outbox), the push
// loop is not caught up (a backlog is leased first, oldest first) or the
// outbox is closed.
func (o *Outbox) reserve(size int) *Reservation {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || !o.caughtUp || len(o.wake) > 0 || o.room() <= 0 || !o.held.reserve(size) {
		return nil
	}
	return &Reservation{h: o, leaseFor: o.leaseFor, via: store.ViaSocket, size: size}
}

// take returns what was handed in, counted pushed already.
func (o *Outbox) take() []*store.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held.take()
}

// took counts n deliveries leased by the push loop.
func (o *Outbox) took(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pushed += int64(n)
}

// waiting says whether the push loop waits for work.
func (o *Outbox) waiting(w bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = w
	o.idle = w && len(o.poke) == 0 && len(o.wake) == 0
}

// setCaughtUp records the push loop's loopState.caughtUp. A look asked
// for since the loop last took the ask (Poke, pending) keeps it from
// being caught up: its last look may have missed what came meanwhile.
func (o *Outbox) setCaughtUp(v bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.caughtUp = v && !o.relook
}

// pending says a delivery of the host was just stored pending (not leased
// to this connection): the intake leases nothing more to it until the
// push loop looked again — a webhook stored after that one is not pushed
// before it — and the loop looks at once, not when the store's wake-up
// reaches it.
func (o *Outbox) pending() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.caughtUp, o.relook = false, true
	o.nudge()
}

// Reservation is room held for one delivery about to be stored, on a
// host's connection (Connections.Reserve) or on its long poll waiting here
// (Intake.Reserve). Its methods accept a nil Reservation (no room was had),
// which does nothing.
type Reservation struct {
	h        holder
	leaseFor time.Duration
	via      store.Via // the transport the holder hands it out on
	size     int       // the body's bytes
	settled  bool
}

// holder is what holds room for a Reservation: an Outbox, a waiting poll.
type holder interface {
	// settle ends one reservation of size body bytes: d is the delivery
	// stored leased to the holder, nil when none was (the room is given
	// back).
	settle(d *store.Delivery, size int)
}

// Lease is what the insert stores the delivery with: leased to the
// holder (nil for a nil Reservation: stored pending).
func (v *Reservation) Lease() *store.InsertLease {
	if v == nil {
		return nil
	}
	return &store.InsertLease{For: v.leaseFor, Via: v.via}
}

// Settle says how the insert ended: a delivery stored leased goes to the
// holder (a connection's push loop, a poll's answer); otherwise (an error,
// a duplicate, a revived delivery, which are not leased) the room is given
// back. It reports whether the delivery was handed over. Call it once the
// insert's outcome is known — committed or not; an insert whose outcome is
// unknown (its caller stopped waiting) leaves the delivery to its lease's
// expiry. Calls after the first do nothing.
func (v *Reservation) Settle(res *store.DeliveryInsertResult, err error) bool {
	if v == nil || v.settled {
		return false
	}
	v.settled = true
	var d *store.Delivery
	if err == nil && res != nil && res.Outcome == store.InsertQueued && res.Delivery.Status == store.TransitionLease.To {
		c := *res.Delivery
		c.Headers = maps.Clone(c.Headers) // the answer stamps its own copy
		steptime.Stamp(c.Headers, "leased", steptime.Now())
		d = &c
	}
	v.h.settle(d, v.size)
	return d != nil
}

func (o *Outbox) settle(d *store.Delivery, size int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held.settle(d, size)
	if d != nil {
		o.pushed++
	}
	o.nudge()
}
