package delivery

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// poll is a host's long poll (a Lease that waits) as the intake sees it.
//
// A webhook stored for a host whose long poll on this replica waits with
// nothing found (its last look leased nothing, and nothing woke it since)
// is stored already leased to that poll (Intake.Reserve, then
// Reservation.Settle), which answers with it: one transaction, the
// insert's, instead of an insert and then a lease. Only then: a poll
// catching up on a backlog leases it oldest first. A poll holds room for
// at most its max; once one delivery was handed to it, it takes no more
// and answers as soon as the reservations it holds have settled. What it
// holds is bounded in bytes as a lease's answer is (see room).
//
// Its methods are safe for concurrent use.
type poll struct {
	max     int
	wake    <-chan struct{} // the poll's subscription: a pending wake-up says it must look
	ready   chan struct{}   // receives when its reservations settled with something handed
	ended   chan struct{}   // closed when its host said it is stopping (end)
	endOnce sync.Once

	mu   sync.Mutex
	open bool // it waits, and its last look found nothing
	// idle: open, with nothing to react to (Intake.Idle); closing: close
	// waits for the inserts holding room (Intake.Closing).
	idle, closing bool
	stale         bool // a delivery was stored pending since: look again before opening
	held          room // what the intake reserved and handed in

	// Set by Service.openPoll: done ends the poll's subscription and its
	// watch (once). parked: its answer went out and it stays open for the
	// host's next poll (see park.go) until expire runs.
	parked bool
	done   func()
	expire clockwork.Timer
}

func newPoll(max int, maxBytes int, wake <-chan struct{}) *poll {
	p := &poll{max: max, wake: wake, ready: make(chan struct{}, 1), ended: make(chan struct{})}
	p.held = newRoom(&p.mu, maxBytes)
	return p
}

// reserve holds room for one delivery of size body bytes about to be
// stored; nil when the poll is not waiting with nothing found, was handed
// one already (unless parked: no one waits to answer), or holds its max
// or its bytes.
func (p *poll) reserve(leaseFor time.Duration, size int) *Reservation {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open || len(p.wake) > 0 || (len(p.held.handed) > 0 && !p.parked) || p.held.reserved+len(p.held.handed) >= p.max || !p.held.reserve(size) {
		return nil
	}
	return &Reservation{h: p, leaseFor: leaseFor, via: store.ViaHeartbeat, size: size}
}

func (p *poll) settle(d *store.Delivery, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held.settle(d, size)
	if p.held.reserved == 0 && len(p.held.handed) > 0 {
		p.idle = false
		select {
		case p.ready <- struct{}{}:
		default:
		}
	}
}

// setOpen opens the poll to reservations: it waits, having found nothing.
func (p *poll) setOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stale {
		// Its last look may have missed a delivery stored pending
		// meanwhile, whose wake-up is on its way: it stays closed until
		// it looked again.
		p.stale = false
		return
	}
	p.open = true
	p.idle = len(p.ready) == 0 && len(p.wake) == 0
}

// openEarly opens the poll to reservations before it waits (it found
// nothing, or its host's last poll did), unless a delivery was stored
// pending since: that stays for setOpen, which then keeps it closed until
// it looked again. It is not idle yet: it has its wait to set up.
func (p *poll) openEarly() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = !p.stale
}

// openParked opens the answered poll to reservations for the host's next
// poll, unless a delivery was stored pending since its last look (or a
// wake-up waits, which reserve checks): then it stays closed, and its
// next poll looks (parkedClean). It is never idle: no one waits on it.
func (p *poll) openParked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open, p.idle, p.parked = !p.stale, false, true
}

// refuse closes the poll to reservations (close waits for those it holds).
func (p *poll) refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open, p.idle = false, false
}

// parkedClean says whether nothing is known to wait for the host beyond
// what the poll holds: no delivery stored pending since its last look, no
// wake-up. Call it once the poll is closed.
func (p *poll) parkedClean() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.stale && len(p.wake) == 0
}

// pending says a delivery of the host was just stored pending: the poll
// takes no room until it looked again, so that no webhook stored after
// that one is answered before it.
func (p *poll) pending() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open, p.stale, p.idle = false, true, false
}

// close refuses room from now on (until setOpen), waits until every insert
// that holds some settled (the group commit bounds it), and returns what
// was handed to the poll: stored leased to it.
func (p *poll) close() []*store.Delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open, p.idle, p.closing = false, false, true
	p.held.waitSettled()
	p.closing = false
	ds := p.held.take()
	select { // its signal, if any, is answered here
	case <-p.ready:
	default:
	}
	return ds
}

// end answers the poll at once: its host is stopping.
func (p *poll) end() {
	p.mu.Lock()
	p.idle = false
	p.mu.Unlock()
	p.endOnce.Do(func() { close(p.ended) })
}

// state says whether the poll is idle and whether it is closing.
func (p *poll) state() (idle, closing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle, p.closing
}

// Intake is where the intake holds room for a webhook about to be stored,
// so that it is stored leased to whatever takes it at once: the host's
// connection on this replica when it has one (Connections.Reserve), else
// one of its long polls waiting here.
type Intake struct {
	conns *Connections
	polls *Service
}

// NewIntake returns the intake's reservations over conns and s's polls.
func NewIntake(conns *Connections, s *Service) *Intake {
	return &Intake{conns: conns, polls: s}
}

// Reserve holds room for one delivery of hostID, of size body bytes,
// about to be stored; nil when there is none: the delivery is stored
// pending, and whoever waits for the host is woken to lease it.
func (i *Intake) Reserve(hostID string, size int) *Reservation {
	if v, ok := i.conns.reserve(hostID, size); ok {
		return v
	}
	return i.polls.reservePoll(hostID, size)
}

// Pending says a delivery of hostID was stored pending (no room was held
// for it, or it was not leased): whatever waits for the host leases no
// webhook at intake until it looked again, so that the host's webhooks
// reach it in the order they were stored. Call it before the provider is
// answered.
func (i *Intake) Pending(hostID string) {
	i.conns.pending(hostID)
	i.polls.pendingPolls(hostID)
}

// Idle says whether hostID's connection on this replica pushes and its
// push loop waits with nothing to react to (Outbox.Idle), or, with no
// connection here, one of its long polls waiting here does: no
// reservation settled with a delivery for it and no stop since it began to
// wait, and no wake-up of the host's pending then (a later wake-up is not
// seen: wait on what it leads to). Tests wait on it, not on time, to know
// that what waits for the host made its decision and nothing more happens
// until something does.
func (i *Intake) Idle(hostID string) bool {
	if o := i.conns.outbox(hostID); o != nil {
		return o.Idle()
	}
	idle := false
	i.polls.eachPoll(hostID, func(p *poll) {
		ok, _ := p.state()
		idle = idle || ok
	})
	return idle
}

// Closing says whether hostID's connection on this replica, or one of its
// long polls waiting here, ends and waits for the inserts that hold its
// room (for tests, as Idle).
func (i *Intake) Closing(hostID string) bool {
	if o := i.conns.outbox(hostID); o != nil && o.Closing() {
		return true
	}
	closing := false
	i.polls.eachPoll(hostID, func(p *poll) {
		_, ok := p.state()
		closing = closing || ok
	})
	return closing
}
