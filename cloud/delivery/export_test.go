package delivery

// SetPushed sets how many deliveries o counts pushed.
func (o *Outbox) SetPushed(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pushed = n
}

// TakeWaits says whether a Take waits for the marks in flight.
func (m *Marker) TakeWaits() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takers > 0
}

// Waits says whether NextPush waits on o.
func (o *Outbox) Waits() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waits
}

// ParkFor is how long an answered poll stays parked.
const ParkFor = parkFor

// Parked says whether hostID has a parked poll on this replica.
func (s *Service) Parked(hostID string) bool {
	s.wakeups.mu.Lock()
	defer s.wakeups.mu.Unlock()
	return s.wakeups.parked[hostID] != nil
}
