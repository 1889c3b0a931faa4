package alert

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// A host's series follow the evaluations: set while the host is read,
// deleted once it is not, the others kept with their new values.
func TestHostGaugesFollowTheLastEvaluation(t *testing.T) {
	m := newMetrics()
	now := time.Now()
	old := now.Add(-time.Minute)
	series := func() map[string]int {
		return map[string]int{"pending": seriesOf(m.pending.vec), "oldest": seriesOf(m.oldest.vec),
			"dlq": seriesOf(m.deadLetters.vec), "offline": seriesOf(m.offline.vec)}
	}

	m.observeBacklog(now, []*store.HostBacklog{{HostID: "a", Pending: 2, OldestPending: &old}, {HostID: "b", DLQ: 1}})
	m.observeOffline(now, []*store.PresenceChange{{HostID: "a", Since: &old}})
	require.Equal(t, map[string]int{"pending": 2, "oldest": 1, "dlq": 2, "offline": 1}, series())

	m.observeBacklog(now, []*store.HostBacklog{{HostID: "b", Pending: 5, OldestPending: &old}, {HostID: "c", DLQ: 3}})
	m.observeOffline(now, nil)
	require.Equal(t, map[string]int{"pending": 2, "oldest": 1, "dlq": 2, "offline": 0}, series(), "a gone, c come")
	require.Equal(t, 5.0, value(t, m.pending.vec.WithLabelValues("b")))
	require.Equal(t, 3.0, value(t, m.deadLetters.vec.WithLabelValues("c")))
	require.Equal(t, 60.0, value(t, m.oldest.vec.WithLabelValues("b")))

	m.observeBacklog(now, nil)
	require.Equal(t, map[string]int{"pending": 0, "oldest": 0, "dlq": 0, "offline": 0}, series())

	// A reset (the lease lost) forgets what was shown: the next
	// evaluation's hosts are all the gauge tracks.
	m.observeBacklog(now, []*store.HostBacklog{{HostID: "d", Pending: 1}})
	m.reset()
	require.Equal(t, map[string]int{"pending": 0, "oldest": 0, "dlq": 0, "offline": 0}, series(), "reset")
	require.Empty(t, m.pending.shown)
	m.observeBacklog(now, []*store.HostBacklog{{HostID: "e", Pending: 1}})
	require.Equal(t, 1, seriesOf(m.pending.vec))
	require.Equal(t, map[string]struct{}{"e": {}}, m.pending.shown, "d not tracked after the reset")
	require.Empty(t, m.pending.next)
}

// seriesOf counts the series c collects.
func seriesOf(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// value is g's value.
func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}
