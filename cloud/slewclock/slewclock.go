// Package slewclock is the cloud's clock: the system's wall clock, with a
// step of it (NTP setting a clock that drifted, an operator's date, a VM
// resumed) slewed: absorbed gradually, as NTP slews a clock, rather than
// taken at once.
//
// Leases, retry schedules, token expiry and retention are wall-clock
// timestamps stored in the database and compared with the clock's now: a
// step forward of minutes would expire every lease and fire every retry due
// within it at once; a step back would stall them all for its length. Go's
// timers and durations run on the monotonic clock, which a step leaves
// alone; this clock runs on it too, and meets the wall clock again at a
// bounded rate: through a step it runs at most Rate faster or slower than
// real time (at once again once it has caught up), so a lease lasts between
// 1/(1+Rate) and 1/(1-Rate) of its length, and what came due within the
// step comes due spread over Step/Rate, in its order. A step larger than
// MaxSlew is a clock set, not adjusted, and is taken at once.
package slewclock

import (
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Defaults.
const (
	// Rate is how much faster or slower than real time the clock runs while
	// it absorbs a step: a step of 5 min takes 10 min.
	Rate = 0.5
	// MaxSlew is the largest step absorbed gradually; a larger one is taken
	// at once.
	MaxSlew = time.Hour
)

// Clock is a clockwork.Clock whose Now follows the wall clock but never
// steps by up to MaxSlew; its timers and tickers are the underlying
// clock's, which run on real durations. Safe for concurrent use.
type Clock struct {
	clockwork.Clock
	wall func() time.Time     // the system's wall clock
	mono func() time.Duration // time elapsed, on a clock that never steps
	log  *slog.Logger

	mu       sync.Mutex
	last     time.Time     // the last reading returned
	lastMono time.Duration // mono at that reading
	behind   time.Duration // the step being absorbed at the last reading
}

// New returns the cloud's clock over the system's.
func New(log *slog.Logger) *Clock {
	start := time.Now()
	return newClock(clockwork.NewRealClock(), func() time.Time { return time.Now().Round(0) },
		func() time.Duration { return time.Since(start) }, log)
}

// NewWith returns a clock reading wall, absorbing its steps measured
// against mono (time elapsed on a clock that never steps), with timers
// from base: for tests that step a clock.
func NewWith(base clockwork.Clock, wall func() time.Time, mono func() time.Duration, log *slog.Logger) *Clock {
	return newClock(base, wall, mono, log)
}

func newClock(base clockwork.Clock, wall func() time.Time, mono func() time.Duration, log *slog.Logger) *Clock {
	return &Clock{Clock: base, wall: wall, mono: mono, log: log, last: wall(), lastMono: mono()}
}

// Now returns the wall clock's time when it has not stepped; through a step,
// the time it would show without it, moved towards the wall clock at Rate.
// It never goes back by less than MaxSlew.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, w := c.mono(), c.wall()
	elapsed := m - c.lastMono
	free := c.last.Add(elapsed) // where the clock is without the wall's step
	off := w.Sub(free)          // the wall clock's step, not yet absorbed
	allow := time.Duration(float64(elapsed) * Rate)
	now := w
	switch {
	case off > MaxSlew || off < -MaxSlew:
		c.log.Warn("the system clock was set: taken at once", "step", off.String())
	case off > allow:
		now = free.Add(allow)
	case off < -allow:
		now = free.Add(-allow)
	}
	c.noteStep(w.Sub(now))
	c.last, c.lastMono = now, m
	return now
}

// noteStep logs a step when it starts being absorbed and once it is.
func (c *Clock) noteStep(behind time.Duration) {
	const quiet = time.Second // drift and NTP's own slewing stay below this
	switch {
	case c.behind == 0 && (behind > quiet || behind < -quiet):
		c.log.Warn("the system clock stepped: the cloud's clock meets it gradually",
			"step", behind.String(), "rate", Rate, "for", time.Duration(float64(max(behind, -behind))/Rate).Round(time.Second).String())
		c.behind = behind
	case c.behind != 0 && behind == 0:
		c.log.Info("the cloud's clock has met the system clock again")
		c.behind = 0
	}
}

// Since returns the time elapsed since t on this clock.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the time until t on this clock.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
