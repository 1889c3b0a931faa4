package slewclock

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// system is a system clock that steps: real is real time (what the
// monotonic clock measures), wall is what the system clock shows.
type system struct {
	real *clockwork.FakeClock
	mu   sync.Mutex
	step time.Duration
}

func newSystem() (*system, *Clock) {
	s := &system{real: clockwork.NewFakeClockAt(t0)}
	c := newClock(s.real, s.wall, func() time.Duration { return s.real.Since(t0) }, slog.New(slog.DiscardHandler))
	return s, c
}

func (s *system) wall() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.real.Now().Add(s.step)
}

func (s *system) stepBy(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step += d
}

func TestFollowsTheWallClock(t *testing.T) {
	t.Parallel()
	s, c := newSystem()
	require.Equal(t, t0, c.Now())
	for range 100 {
		s.real.Advance(time.Second)
		require.Equal(t, s.wall(), c.Now())
	}
	// Drift and NTP's own slewing (well under Rate) are followed exactly.
	s.real.Advance(time.Second)
	s.stepBy(10 * time.Millisecond)
	require.Equal(t, s.wall(), c.Now())
}

// TestStepAbsorbed: a step of the system clock, forward or back by
// minutes, is met at Rate: the clock never jumps, never stops, and meets
// the wall clock after step/Rate.
func TestStepAbsorbed(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		s, c := newSystem()
		s.real.Advance(time.Minute)
		before := c.Now()
		s.stepBy(step)
		s.real.Advance(time.Second)
		now := c.Now()
		if step > 0 {
			require.Equal(t, before.Add(1500*time.Millisecond), now, "a step forward: at 1.5 times real time")
		} else {
			require.Equal(t, before.Add(500*time.Millisecond), now, "a step back: at half real time, never still")
		}
		// Met after step/Rate = 10 min, whatever how often it is read.
		last := now
		for range 599 - 1 {
			s.real.Advance(time.Second)
			n := c.Now()
			require.True(t, n.After(last))
			require.NotEqual(t, s.wall(), n)
			last = n
		}
		s.real.Advance(2 * time.Second)
		require.Equal(t, s.wall(), c.Now(), "step %v met after 10 min", step)
		s.real.Advance(time.Second)
		require.Equal(t, s.wall(), c.Now())
	}
}

func TestLargeStepTakenAtOnce(t *testing.T) {
	t.Parallel()
	s, c := newSystem()
	s.stepBy(-2 * time.Hour)
	s.real.Advance(time.Second)
	require.Equal(t, s.wall(), c.Now(), "a clock set, not adjusted")
	s.stepBy(25 * time.Hour)
	s.real.Advance(time.Second)
	require.Equal(t, s.wall(), c.Now())
}

func TestTimersRunOnRealTime(t *testing.T) {
	t.Parallel()
	s, c := newSystem()
	tm := c.NewTimer(time.Minute)
	s.stepBy(30 * time.Minute)
	s.real.Advance(59 * time.Second)
	select {
	case <-tm.Chan():
		t.Fatal("a step does not fire a timer")
	default:
	}
	s.real.Advance(time.Second)
	<-tm.Chan()
}
