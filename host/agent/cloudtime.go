package agent

import (
	"log/slog"
	"sync"
	"time"
)

// skewWarn is how far this host's clock may be from the cloud's before the
// agent says so in its log.
const skewWarn = time.Minute

// cloudTime follows the cloud's clock as its answers tell it (their now).
// The cloud's times — leases, retries, audit — are the truth; this host's
// clock may be minutes or hours off, or jump. Durations (token renewal,
// lease extends, the heartbeat's cadence) are measured on this host's
// monotonic clock and need none of this; what compares this host's time
// with the cloud's, or prunes by age, asks it.
type cloudTime struct {
	log *slog.Logger

	mu     sync.Mutex
	known  bool
	offset time.Duration // cloud minus host, as last measured
	warned time.Duration // the offset last reported in the log
}

// observe notes the cloud's now, in an answer that arrived at received
// (this host's clock). The cloud reads its clock as it answers, after any
// long poll: the two differ by the answer's way back, well under the
// second this rounds to. A zero now (a cloud that does not say) changes
// nothing.
func (c *cloudTime) observe(received, now time.Time) {
	if now.IsZero() {
		return
	}
	// Wall clock against wall clock: received's monotonic reading plays no
	// part against a time parsed from the wire.
	offset := now.Sub(received).Round(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known, c.offset = true, offset
	// Said once per change of a minute or more, not on every answer.
	if d := offset - c.warned; d > -skewWarn && d < skewWarn {
		return
	}
	c.warned = offset
	if offset >= skewWarn || offset <= -skewWarn {
		c.log.Warn("this host's clock is off from the cloud's: the cloud's time is used where the two meet (token lifetime, ledger retention); ledger and local API times stay on this host's clock",
			"host_ahead_by", (-offset).String())
		return
	}
	c.log.Info("this host's clock agrees with the cloud's again", "host_ahead_by", (-offset).String())
}

// skew returns how far this host's clock is ahead of the cloud's (negative:
// behind), and false while no answer said.
func (c *cloudTime) skew() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return -c.offset, c.known
}

// at returns the cloud's time at hostNow, a time on this host's clock, and
// false while no answer said.
func (c *cloudTime) at(hostNow time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return time.Time{}, false
	}
	return hostNow.Add(c.offset), true
}
