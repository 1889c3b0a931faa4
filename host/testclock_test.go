package main

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestTestClock(t *testing.T) {
	t.Parallel()
	real := clockwork.NewFakeClockAt(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == envTestClock {
				return v
			}
			return ""
		}
	}
	c, err := testClock(env(""), real)
	require.NoError(t, err)
	require.Same(t, real, c, "unset: the real clock itself")

	c, err = testClock(env("-1h"), real)
	require.NoError(t, err)
	require.Equal(t, real.Now().Add(-time.Hour), c.Now())

	c, err = testClock(env("+10m,-1h@30s"), real)
	require.NoError(t, err)
	require.Equal(t, real.Now().Add(10*time.Minute), c.Now())
	real.Advance(29 * time.Second)
	require.Equal(t, real.Now().Add(10*time.Minute), c.Now())
	real.Advance(time.Second)
	require.Equal(t, real.Now().Add(-50*time.Minute), c.Now(), "stepped back an hour")
	require.Equal(t, -50*time.Minute, c.Since(real.Now()))

	for _, bad := range []string{"1 hour", "+1h,-1h", "+1h,x@1s", "+1h,-1h@-1s"} {
		_, err := testClock(env(bad), real)
		require.ErrorContains(t, err, envTestClock, bad)
	}
}
