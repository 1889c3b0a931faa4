package server

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// hostLimiters holds one token bucket per host, sized from the host's own
// settings (or the server's defaults) and rebuilt when those change. Time
// comes from the caller, so tests drive it with a fake clock.
type hostLimiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newHostLimiters() *hostLimiters { return &hostLimiters{m: make(map[string]*rate.Limiter)} }

// allow takes one token from the host's bucket refilled at perMin per minute
// and holding burst. When none is left it reports how long until one is.
// A bucket whose size or rate differs from the host's settings (changed by
// PATCH /api/hosts/:id) is replaced by a full one of the new size: a raised
// limit applies at once rather than as the old bucket refills.
func (l *hostLimiters) allow(hostID string, perMin, burst int, now time.Time) (bool, time.Duration) {
	limit := rate.Limit(float64(perMin) / 60)
	l.mu.Lock()
	lim, ok := l.m[hostID]
	if !ok || lim.Limit() != limit || lim.Burst() != burst {
		lim = rate.NewLimiter(limit, burst)
		// A new bucket starts full at now, not at the zero time.
		lim.SetLimitAt(now, limit)
		l.m[hostID] = lim
	}
	l.mu.Unlock()
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

// retryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// sampler lets through at most a fixed number of events per host and
// minute: what is recorded or logged per refused request, so that a flood
// costs neither disk nor log volume.
type sampler struct {
	l             *hostLimiters
	perMin, burst int
}

func newSampler(perMin, burst int) *sampler {
	return &sampler{l: newHostLimiters(), perMin: perMin, burst: burst}
}

func (s *sampler) allowOne(hostID string, now time.Time) bool {
	ok, _ := s.l.allow(hostID, s.perMin, s.burst, now)
	return ok
}
