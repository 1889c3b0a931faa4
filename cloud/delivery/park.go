package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// A long poll that answered with work stays open to the intake for its
// host's next poll: it is parked. Between an answer and the next poll (the
// host reads the answer, hands it to its workers and polls again at once)
// no poll of the host waits, and a webhook stored then went pending: it
// waited for the next poll's lease transaction (or for a wake-up and a
// lease of its own). Parked, the answered poll holds room for it as a
// waiting poll does (Intake.Reserve): it is stored leased, and the next
// poll answers with it at once, with no lease.
//
// Only a poll whose answer left nothing known to wait parks (its lease
// found no more, no delivery stored pending and no wake-up since), so a
// parked poll never takes a webhook ahead of an older one; a delivery
// stored pending while it is parked closes it (poll.pending), and the next
// poll looks as ever. What it holds when parkFor passes with no next poll
// of its host here (the host went quiet, or polls another replica) is
// given back at once, its attempt with it: due again, for whoever leases
// it next.

// parkFor is how long an answered poll stays parked. A host polls again
// within milliseconds of an answer; what waits longer was not coming.
const parkFor = 500 * time.Millisecond

// openPoll subscribes to the host's wake-ups and makes a poll of max
// deliveries the intake may reserve room on; endPoll ends both.
func (s *Service) openPoll(hostID string, max int) *poll {
	ch, unsubscribe := s.Subscribe(hostID)
	pl := newPoll(max, s.cfg.MaxBatchBytes, ch)
	unwatch := s.wakeups.watch(hostID, pl)
	pl.done = sync.OnceFunc(func() {
		unwatch()
		unsubscribe()
	})
	return pl
}

// endPoll ends pl's subscription and watch; nil does nothing. Only the
// poll's owner calls it: its Lease, or whoever took it parked.
func (s *Service) endPoll(pl *poll) {
	if pl != nil {
		pl.done()
	}
}

// answered parks pl, which answered the host's poll, when clean (nothing
// else is known to wait for the host), else ends it.
func (s *Service) answered(hostID string, pl *poll, clean bool) {
	if pl == nil {
		return
	}
	if !clean || !s.parkPolls.Load() {
		s.endPoll(pl)
		return
	}
	w := s.wakeups
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		s.endPoll(pl)
		return
	}
	if w.parked == nil {
		w.parked = map[string]*poll{}
	}
	old := w.parked[hostID]
	w.parked[hostID] = pl
	pl.openParked()
	// Under w.mu: its expiry finds it parked, or taken.
	pl.expire = s.clock.AfterFunc(parkFor, func() { s.giveBackParked(hostID, pl) })
	w.mu.Unlock()
	if old != nil {
		// Two polls of the host answered at once: the older one's room
		// is given back.
		s.giveBackParked(hostID, old)
	}
}

// takeParked takes the host's parked poll (only pl, when not nil), closed
// to the intake, with what it holds; nil when there is none.
func (s *Service) takeParked(hostID string, pl *poll) (*poll, []*store.Delivery) {
	w := s.wakeups
	w.mu.Lock()
	p := w.parked[hostID]
	if p == nil || (pl != nil && p != pl) {
		w.mu.Unlock()
		return nil, nil
	}
	delete(w.parked, hostID)
	p.refuse() // under w.mu, which the intake's reservations take: none after
	w.mu.Unlock()
	p.expire.Stop()
	held := p.close() // waits for the inserts holding its room
	return p, held
}

// unpark takes what the intake stored leased to the host's parked poll,
// for the host's next poll to answer with, and says whether nothing else
// is known to wait for the host (else the poll after looks).
func (s *Service) unpark(hostID string) ([]*store.Delivery, bool) {
	p, held := s.takeParked(hostID, nil)
	if p == nil {
		return nil, false
	}
	clean := p.parkedClean()
	s.endPoll(p)
	return held, clean
}

// giveBackParked gives back what the host's parked poll holds (pl's, or
// any when nil): no poll of its host came in time, its host is stopping
// or lost an answer, or the cloud stops waiting.
func (s *Service) giveBackParked(hostID string, pl *poll) {
	if p, held := s.takeParked(hostID, pl); p != nil {
		s.endPoll(p)
		s.giveBack(hostID, held)
	}
}

// giveBack makes deliveries stored leased to a parked poll due again at
// once, their attempt given back: no answer carried them. One a group
// member held goes to another member as a failed attempt would. A give-back
// that fails leaves them to their lease's expiry, which does the same.
func (s *Service) giveBack(hostID string, ds []*store.Delivery) {
	if len(ds) == 0 {
		return
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	p := UnclaimedParams(hostID, ids, s.cfg.Policy, s.now())
	p.Fail = s.cfg.Groups.Handover(p.Fail, p.Now)
	if _, err := s.store.DeliveryRelease(context.Background(), p); err != nil {
		s.log.Warn("give back deliveries held for a host's next poll; their leases will end", "host", hostID,
			"deliveries", len(ids), "err", err)
	}
}

// giveBackAllParked gives back what every parked poll holds (StopWaiting).
func (s *Service) giveBackAllParked() {
	w := s.wakeups
	w.mu.Lock()
	hosts := make([]string, 0, len(w.parked))
	for h := range w.parked {
		hosts = append(hosts, h)
	}
	w.mu.Unlock()
	for _, h := range hosts {
		s.giveBackParked(h, nil)
	}
}
