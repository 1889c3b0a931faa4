// Package steptime stamps a webhook with the wall-clock time of each step
// it passes on its way from the cloud's commit to the local handler, for
// the benchmark's breakdown of end-to-end latency. It is off unless
// RELAY_STEP_TIMES=1 is in the environment of the process (the bench sets
// it on the cloud and the host it runs); off, Stamp is one boolean test.
//
// The stamps travel as one header, Header, of the webhook as the host
// receives and forwards it: "step=unix-nanoseconds" pairs joined by
// commas, in order. They are read on one machine, where every process
// shares the wall clock, so the wall clock (not an injected clock) is the
// point.
package steptime

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Header carries the stamps.
const Header = "X-Relay-Step-Times"

// Env turns stamping on when it is "1".
const Env = "RELAY_STEP_TIMES"

var enabled = os.Getenv(Env) == "1"

// Enabled reports whether this process stamps.
func Enabled() bool { return enabled }

// Now is the wall clock's time when stamping is on, else the zero time
// (which Stamp leaves out).
func Now() time.Time {
	if !enabled {
		return time.Time{}
	}
	return time.Now()
}

// Stamp appends step at t to the headers h (nil is left alone), when
// stamping is on.
func Stamp(h map[string]string, step string, t time.Time) {
	if !enabled || h == nil || t.IsZero() {
		return
	}
	s := step + "=" + strconv.FormatInt(t.UnixNano(), 10)
	if prev := h[Header]; prev != "" {
		s = prev + "," + s
	}
	h[Header] = s
}

// Step is one stamp.
type Step struct {
	Name string
	At   time.Time
}

// Parse reads a Header value; malformed pairs are skipped.
func Parse(v string) []Step {
	var out []Step
	for _, p := range strings.Split(v, ",") {
		name, at, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Step{Name: name, At: time.Unix(0, n)})
	}
	return out
}
