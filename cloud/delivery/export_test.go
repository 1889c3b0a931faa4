package delivery

// Added is how many deliveries were added to m, ever.
func (m *Marker) Added() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.added
}

// FlushTo is Flush with the count of deliveries added it waits for.
func (m *Marker) FlushTo(target int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushTo(target)
}

// SetPushed sets how many deliveries o counts pushed.
func (o *Outbox) SetPushed(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pushed = n
}

// Waits says whether Next waits on o.
func (o *Outbox) Waits() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waits
}
