package sweep

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are what the Runner exports of each job, by its name: the rows
// its passes changed, the time they took and the passes that failed. An
// operator reads from them whether retention keeps up with intake (rows
// pruned per second of pass against webhooks received) and how long the
// upkeep holds the store's writer.
type Metrics struct {
	rows, seconds, failures *prometheus.CounterVec
}

// NewMetrics makes the Runner's metrics with a series for each of jobs, so
// that a job that has not changed anything yet reads 0, not absent.
func NewMetrics(jobs ...Job) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_sweep_rows_total",
			Help: "Rows each upkeep job changed, counted as each batch commits: deliveries (and rejections) pruned by retention, leases expired, claim codes cleared, count changes and volume hours folded."}, []string{"job"}),
		seconds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_sweep_seconds_total",
			Help: "Time each upkeep job's passes took, in seconds, counted as each pass ends."}, []string{"job"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_sweep_failures_total",
			Help: "Passes of each upkeep job that failed (the database did not answer); each is logged."}, []string{"job"}),
	}
	for _, j := range jobs {
		m.rows.WithLabelValues(j.Name)
		m.seconds.WithLabelValues(j.Name)
		m.failures.WithLabelValues(j.Name)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.rows, m.seconds, m.failures}
}

// addRows counts n rows job changed, as a batch of its pass commits; safe
// on a nil Metrics.
func (m *Metrics) addRows(job string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.rows.WithLabelValues(job).Add(float64(n))
}

// observe records the end of one pass of job: the rows it changed that
// its batches did not count as they went, and its time; safe on a nil
// Metrics.
func (m *Metrics) observe(job string, n int, seconds float64, failed bool) {
	if m == nil {
		return
	}
	m.addRows(job, n)
	m.seconds.WithLabelValues(job).Add(seconds)
	if failed {
		m.failures.WithLabelValues(job).Inc()
	}
}
