package alert

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaykit/relay/cloud/store"
)

// Metrics are what the evaluator exports. The per-host series are bounded
// by MaxHosts (the hosts with the oldest backlogs); only the replica that
// evaluates exports the gauges (relay_alert_evaluator is 1 on it).
type Metrics struct {
	evaluator     prometheus.Gauge
	evalErrors    prometheus.Counter
	firing        *prometheus.GaugeVec
	notifications *prometheus.CounterVec
	sinkFailures  *prometheus.GaugeVec
	pending       *prometheus.GaugeVec
	oldest        *prometheus.GaugeVec
	deadLetters   *prometheus.GaugeVec
}

func newMetrics() *Metrics {
	return &Metrics{
		evaluator: prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_alert_evaluator",
			Help: "1 on the replica that holds the alert evaluator's lease."}),
		evalErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "relay_alert_evaluation_errors_total",
			Help: "Alert evaluations that failed (the database did not answer)."}),
		firing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_alerts_firing",
			Help: "Alerts firing, by rule."}, []string{"rule"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_alert_notifications_total",
			Help: "Notification attempts by sink kind and result (sent, failed)."}, []string{"kind", "result"}),
		sinkFailures: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_alert_sink_failures",
			Help: "Failed attempts of each sink since its last success."}, []string{"sink"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_host_pending_deliveries",
			Help: "Deliveries waiting for a host (queued, delivering, delivered, retrying), at most 1000 hosts."}, []string{"host"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_host_oldest_pending_seconds",
			Help: "Age of the oldest delivery waiting for a host, at most 1000 hosts."}, []string{"host"}),
		deadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_host_dead_letters",
			Help: "Dead-lettered deliveries of a host, at most 1000 hosts."}, []string{"host"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.evaluator, m.evalErrors, m.firing, m.notifications, m.sinkFailures, m.pending, m.oldest, m.deadLetters}
}

func (m *Metrics) observeBacklog(now time.Time, backlog []*store.HostBacklog) {
	m.pending.Reset()
	m.oldest.Reset()
	m.deadLetters.Reset()
	for _, b := range backlog {
		m.pending.WithLabelValues(b.HostID).Set(float64(b.Pending))
		m.deadLetters.WithLabelValues(b.HostID).Set(float64(b.DLQ))
		if b.OldestPending != nil {
			m.oldest.WithLabelValues(b.HostID).Set(now.Sub(*b.OldestPending).Seconds())
		}
	}
}

func (m *Metrics) observeFiring(byRule map[string]int) {
	for _, r := range Rules {
		m.firing.WithLabelValues(r.Name).Set(float64(byRule[r.Name]))
	}
}

// reset clears the gauges of a replica that no longer evaluates.
func (m *Metrics) reset() {
	m.pending.Reset()
	m.oldest.Reset()
	m.deadLetters.Reset()
	m.firing.Reset()
}
