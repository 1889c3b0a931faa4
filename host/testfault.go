package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/agent"
)

// envTestCrash arms a fault hook for end-to-end tests ONLY: with
// RELAY_HOST_TEST_CRASH=after-handler the host kills itself (SIGKILL, as a
// power cut would) right after a handler returned and before its outcome is
// written to the ledger; with after-ledger, right after the outcome and its
// ack are committed and before the ack is sent. Tests use it to show which
// crashes run a handler again (after-handler: the at-least-once window the
// Idempotency-Key exists for) and which never do (after-ledger). It is
// unset in normal use, and `host run` logs a warning whenever it is set.
const envTestCrash = "RELAY_HOST_TEST_CRASH"

// testFaultHook returns the hook RELAY_HOST_TEST_CRASH asks for, or nil.
func testFaultHook(getenv func(string) string) (func(string), error) {
	point := getenv(envTestCrash)
	switch point {
	case "":
		return nil, nil
	case agent.FaultAfterHandler, agent.FaultAfterLedger:
	default:
		return nil, fmt.Errorf("%s=%q: want %s or %s", envTestCrash, point, agent.FaultAfterHandler, agent.FaultAfterLedger)
	}
	return func(at string) {
		if at != point {
			return
		}
		fmt.Fprintf(os.Stderr, "%s: killing the host at %s\n", envTestCrash, at)
		self, err := os.FindProcess(os.Getpid())
		if err == nil {
			err = self.Kill()
		}
		if err != nil {
			os.Exit(137)
		}
		select {} // the signal is on its way; nothing more runs here
	}, nil
}

// envTestClock skews the host's clock, for end-to-end tests ONLY:
// RELAY_HOST_TEST_CLOCK_OFFSET=+1h runs the host with its clock an hour
// ahead of the machine's (-10m: ten minutes behind); "+10m,-1h@30s" starts
// ten minutes ahead and steps back an hour 30 s after start. Everything the
// host reads from its clock moves — timestamps, and the durations measured
// between readings taken on either side of a step, which a real step of
// the system clock leaves alone (Go measures them on the monotonic clock):
// the test is the harsher case. Timers still run on real durations. It is
// unset in normal use, and `host run` logs a warning whenever it is set.
const envTestClock = "RELAY_HOST_TEST_CLOCK_OFFSET"

// skewedClock is the machine's clock, offset, and stepped once.
type skewedClock struct {
	clockwork.Clock
	start  time.Time
	offset time.Duration
	step   time.Duration // added to offset once after has passed
	after  time.Duration
}

func (c *skewedClock) Now() time.Time {
	now := c.Clock.Now()
	off := c.offset
	if c.step != 0 && now.Sub(c.start) >= c.after {
		off += c.step
	}
	return now.Add(off)
}

func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// testClock returns the clock RELAY_HOST_TEST_CLOCK_OFFSET asks for over
// real, or real itself when it is unset.
func testClock(getenv func(string) string, real clockwork.Clock) (clockwork.Clock, error) {
	v := getenv(envTestClock)
	if v == "" {
		return real, nil
	}
	bad := func(err error) error {
		return fmt.Errorf("%s=%q: want OFFSET or OFFSET,STEP@AFTER (durations, e.g. +1h or +10m,-1h@30s): %v", envTestClock, v, err)
	}
	c := &skewedClock{Clock: real, start: real.Now()}
	off, stepSpec, stepped := strings.Cut(v, ",")
	var err error
	if c.offset, err = time.ParseDuration(off); err != nil {
		return nil, bad(err)
	}
	if stepped {
		step, after, ok := strings.Cut(stepSpec, "@")
		if !ok {
			return nil, bad(errors.New("the step has no @AFTER"))
		}
		if c.step, err = time.ParseDuration(step); err != nil {
			return nil, bad(err)
		}
		if c.after, err = time.ParseDuration(after); err != nil || c.after < 0 {
			return nil, bad(fmt.Errorf("after: %v", after))
		}
	}
	return c, nil
}
