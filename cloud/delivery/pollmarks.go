package delivery

import (
	"sync"
)

// A long poll's answer, once written, is marked delivered as a socket's
// pushes are (Marker): put off by MarkAfter, and recorded by the ack that
// the host's next poll carries when that comes first, as it does for a
// host at work: the answer's own commit is saved (on SQLite, a third of
// a webhook's writer transactions on the long poll). Each host that
// long-polls has one Marker, kept while the service runs (at most one a
// host: hosts are created by the operator).
//
// Only where no other replica shares the store (Config.DeferPollMarks, or
// while a RollCall finds this replica alone): behind a balancer the host's
// next poll may go to a replica that does not hold the marks, whose ack
// would record the delivery acked with no delivered before it.
type pollMarks struct {
	mu sync.Mutex
	by map[string]*Marker
}

// Writing says that ids, leased to host, are being written to it now as a
// long poll's answer; RecordWrite then says how that ended. Said before
// the write, the mark is pending before the host can ack what it reads.
func (s *Service) Writing(hostID string, ids []string) {
	if s.deferMarks.Load() && len(ids) > 0 {
		s.pollMarker(hostID, true).Add(ids)
	}
}

// pollMarker is host's marker of written long-poll answers; nil when
// there is none and create is false.
func (s *Service) pollMarker(hostID string, create bool) *Marker {
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	m := s.marks.by[hostID]
	if m == nil && create {
		if s.marks.by == nil {
			s.marks.by = map[string]*Marker{}
		}
		m = s.NewMarker(hostID)
		s.marks.by[hostID] = m
	}
	return m
}

// takeMarks prepares a poll's report: the marks its acks record
// (Report.Unmarked), the marks of what it nacks or extends made first,
// and, when the host lost an answer, every mark made first (what it
// does not hold is released by the report). It returns what a failed
// report must give back (Marker.Restore).
func (s *Service) takeMarks(hostID string, r *Report) (restore func()) {
	m := s.pollMarker(hostID, false)
	if m == nil || r.empty() {
		return func() {}
	}
	if r.AnswerLost {
		m.Flush()
		return func() {}
	}
	others := make([]string, 0, len(r.Nacks)+len(r.Extends))
	for _, n := range r.Nacks {
		others = append(others, n.ID)
	}
	others = append(others, r.Extends...)
	r.Unmarked = m.Take(r.Acks, others)
	taken := r.Unmarked
	return func() { m.Restore(taken) }
}

// setAlone says whether another replica shares the store, and returns
// what it said before: alone, answered polls park and their marks are put
// off; no longer alone, every mark put off is made at once, before another
// replica can take an ack of it.
func (s *Service) setAlone(alone bool) (was bool) {
	s.deferMarks.Store(alone)
	was = s.parkPolls.Swap(alone)
	if was && !alone {
		s.flushPollMarks()
	}
	return was
}

// flushPollMarks makes every mark put off: the service stops, or another
// replica shares the store.
func (s *Service) flushPollMarks() {
	s.marks.mu.Lock()
	ms := make([]*Marker, 0, len(s.marks.by))
	for _, m := range s.marks.by {
		ms = append(ms, m)
	}
	s.marks.mu.Unlock()
	for _, m := range ms {
		m.Flush()
	}
}
