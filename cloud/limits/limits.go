// Package limits holds the per-key token buckets that bound what a sender
// can make the cloud do: a host's intake rate, and the samplers that let
// through only so many audit rows and log lines a minute per key.
package limits

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Buckets holds one token bucket per key (a host id), sized by the caller
// on each use and rebuilt when that size changes. Time comes from the
// caller, so tests drive it with a fake clock.
type Buckets struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// NewBuckets returns an empty set of buckets.
func NewBuckets() *Buckets { return &Buckets{m: make(map[string]*rate.Limiter)} }

// Allow takes one token from key's bucket refilled at perMin per minute
// and holding burst. When none is left it reports how long until one is.
// A bucket whose size or rate differs from the one asked for (a host's
// settings changed by PATCH /api/hosts/:id) is replaced by a full one of
// the new size: a raised limit applies at once rather than as the old
// bucket refills.
func (b *Buckets) Allow(key string, perMin, burst int, now time.Time) (bool, time.Duration) {
	limit := rate.Limit(float64(perMin) / 60)
	b.mu.Lock()
	lim, ok := b.m[key]
	if !ok || lim.Limit() != limit || lim.Burst() != burst {
		lim = rate.NewLimiter(limit, burst)
		// A new bucket starts full at now, not at the zero time.
		lim.SetLimitAt(now, limit)
		b.m[key] = lim
	}
	b.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Minute
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Sampler lets through at most a fixed number of events per key and
// minute: what is recorded or logged per refused request, so that a flood
// costs neither disk nor log volume.
type Sampler struct {
	b             *Buckets
	perMin, burst int
}

// NewSampler lets perMin events a minute through per key, burst at once.
func NewSampler(perMin, burst int) *Sampler {
	return &Sampler{b: NewBuckets(), perMin: perMin, burst: burst}
}

// Allow reports whether one more event under key may go through now.
func (s *Sampler) Allow(key string, now time.Time) bool {
	ok, _ := s.b.Allow(key, s.perMin, s.burst, now)
	return ok
}
