package delivery

// SetPushed sets how many deliveries o counts pushed.
func (o *Outbox) SetPushed(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pushed = n
}

// Waits says whether NextPush waits on o.
func (o *Outbox) Waits() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waits
}
