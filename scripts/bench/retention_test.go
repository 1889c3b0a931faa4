package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The passes are read off the retention metrics: a pass that ended moved
// the seconds (and the rows); one still running moved only the rows.
func TestRetentionPasses(t *testing.T) {
	began := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return began.Add(time.Duration(s) * time.Second) }
	sample := func(s int, rows, seconds float64) retentionSample {
		return retentionSample{at: at(s), rows: rows, seconds: seconds, size: -1}
	}

	// The week's pass ends at 4 s (it ran 3.5 s); a pass of 1 s ends at
	// 9 s; another is running from after 11 s.
	passes, backlogAt, running := retentionPasses(began, []retentionSample{
		sample(1, 100, 0), sample(2, 300, 0), sample(3, 500, 0), sample(4, 600, 3.5),
		sample(8, 600, 3.5), sample(9, 650, 4.5), sample(10, 650, 4.5), sample(11, 650, 4.5),
		sample(12, 700, 4.5), sample(13, 720, 4.5),
	})
	require.Equal(t, 3, backlogAt)
	require.Equal(t, &window{at(11), at(13)}, running)
	require.Equal(t, []window{{at(3).Add(-3500 * time.Millisecond), at(4)}, {at(8).Add(-time.Second), at(9)}, {at(11), at(13)}}, passes)

	// The week's pass runs for the whole phase: it is the backlog, not
	// ended, and every webhook is sent during it.
	passes, backlogAt, running = retentionPasses(began, []retentionSample{
		sample(1, 100, 0), sample(2, 250, 0), sample(3, 400, 0),
	})
	require.Equal(t, -1, backlogAt)
	require.Equal(t, &window{began, at(3)}, running)
	require.Equal(t, []window{{began, at(3)}}, passes)

	// Nothing to prune: no pass seen.
	passes, backlogAt, running = retentionPasses(began, []retentionSample{sample(1, 0, 0), sample(2, 0, 0)})
	require.Equal(t, -1, backlogAt)
	require.Nil(t, running)
	require.Empty(t, passes)
}
