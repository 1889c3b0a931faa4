package server

import (
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Intake outcomes, the values of relay_intake_requests_total's outcome label.
const (
	outcomeQueued          = "queued"
	outcomeDuplicate       = "duplicate"
	outcomeRevived         = "revived"
	outcomeFiltered        = "filtered"
	outcomeHandshake       = "handshake"
	outcomeBadSignature    = "bad_signature"
	outcomeTooLarge        = "too_large"
	outcomeRateLimited     = "rate_limited"
	outcomeOverLimitStored = "over_limit_stored"
	outcomeQuarantined     = "quarantined"
	outcomeUnavailable     = "unavailable"
	outcomeOverBudget      = "over_budget"
)

// Not quarantined, answered 503: no room (in the quarantine or the host's
// share of it), or over the host's quarantine rate.
const (
	outcomeQuarantineFull        = "quarantine_full"
	outcomeQuarantineRateLimited = "quarantine_rate_limited"
)

// metrics are the server's Prometheus collectors, on the server's own
// registry (no global state).
type metrics struct {
	reg         *prometheus.Registry
	intake      *prometheus.CounterVec
	quarantined prometheus.Gauge
	keysOK      prometheus.Gauge
	batchSize   prometheus.Histogram
	commitTime  prometheus.Histogram
	// connsRefused counts connections closed for the per-address limit.
	connsRefused prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_intake_requests_total",
			Help: "Webhook intake requests by provider and outcome.",
		}, []string{"provider", "outcome"}),
		quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_quarantined_requests",
			Help: "Requests kept because their source secret could not be decrypted.",
		}),
		keysOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_secret_keys_ok",
			Help: "1 when a configured key decrypts the stored secrets' canary, 0 when none does.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_intake_batch_size",
			Help:    "Webhooks stored per intake transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_intake_batch_seconds",
			Help:    "Time to write and commit one intake transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
		}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_connections_refused_total",
			Help: "Connections closed on accept: their address had RELAY_MAX_CONNS_PER_IP open.",
		}),
	}
	m.keysOK.Set(1)
	m.reg.MustRegister(m.intake, m.quarantined, m.keysOK, m.batchSize, m.commitTime, m.connsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) count(provider, outcome string) {
	m.intake.WithLabelValues(provider, outcome).Inc()
}

// ObserveInsertBatch records one intake transaction: how many webhooks it
// stored and how long it took (store.GroupOptions.Observe). Safe on a nil
// server, before one exists.
func (s *Server) ObserveInsertBatch(n int, took time.Duration) {
	if s == nil {
		return
	}
	s.metrics.batchSize.Observe(float64(n))
	s.metrics.commitTime.Observe(took.Seconds())
}

// handler serves GET /metrics (behind the admin token).
func (m *metrics) handler() gin.HandlerFunc {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return func(c *gin.Context) { h.ServeHTTP(c.Writer, c.Request) }
}
