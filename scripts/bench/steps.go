package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
	"github.com/relaykit/relay/shared/steptime"
)

// stepTimes gathers, for each webhook of an end-to-end run, the time
// between consecutive steps on its way: sent (the POST), the cloud's steps
// (verified: the request read, its signature checked, about to be stored;
// stored: the insert committed, for a webhook stored leased to its host's
// socket; notified: the store's wake-up after the intake's commit; woken: the
// waiting push or long poll got it; leased: the lease committed; encoded:
// the frame or answer about to be written), the host's (decoded; looked_up:
// the ledger said it had not run; handler: the handler starts) and
// received (at the receiver). answered is the intake's answer, a step of
// its own beside them.
type stepTimes struct {
	order []string
	gaps  map[string][]time.Duration // "from→to" → durations
}

func newStepTimes() *stepTimes { return &stepTimes{gaps: map[string][]time.Duration{}} }

func (s *stepTimes) add(sent, answered time.Time, hit rig.Hit) {
	steps := append([]steptime.Step{{Name: "sent", At: sent}}, steptime.Parse(hit.StepTimes)...)
	steps = append(steps, steptime.Step{Name: "received", At: hit.First})
	for i := 1; i < len(steps); i++ {
		s.put(steps[i-1].Name+"→"+steps[i].Name, steps[i].At.Sub(steps[i-1].At))
	}
	if !answered.IsZero() {
		s.put("sent→answered", answered.Sub(sent))
		for _, st := range steps {
			if st.Name == "notified" {
				s.put("notified→answered", answered.Sub(st.At))
			}
		}
	}
}

func (s *stepTimes) put(k string, d time.Duration) {
	if _, ok := s.gaps[k]; !ok {
		s.order = append(s.order, k)
	}
	s.gaps[k] = append(s.gaps[k], d)
}

// medians says the median of each step, in the order first seen, with how
// many webhooks had it when not all did.
func (s *stepTimes) medians() string {
	most := 0
	for _, ds := range s.gaps {
		most = max(most, len(ds))
	}
	var b strings.Builder
	for i, k := range s.order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", k, signedMS(newPercentiles(s.gaps[k]).at(0.5)))
		if n := len(s.gaps[k]); n < most {
			fmt.Fprintf(&b, " (%d)", n)
		}
	}
	return b.String()
}

// stepPath is one webhook's way, each step with the time since the one
// before it (ms), and the intake's answer since the POST.
func stepPath(sent, answered time.Time, hit rig.Hit) string {
	steps := append([]steptime.Step{{Name: "sent", At: sent}}, steptime.Parse(hit.StepTimes)...)
	steps = append(steps, steptime.Step{Name: "received", At: hit.First})
	var b strings.Builder
	b.WriteString("sent")
	for i := 1; i < len(steps); i++ {
		fmt.Fprintf(&b, " +%s %s", signedMS(steps[i].At.Sub(steps[i-1].At)), steps[i].Name)
	}
	if !answered.IsZero() {
		fmt.Fprintf(&b, " (answered +%s)", signedMS(answered.Sub(sent)))
	}
	return b.String()
}
