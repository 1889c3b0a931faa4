package server

import (
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
)

// metrics are the server's Prometheus collectors, on the server's own
// registry (no global state).
type metrics struct {
	reg         *prometheus.Registry
	intake      *prometheus.CounterVec
	quarantined prometheus.Gauge
	keysOK      prometheus.Gauge
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
	}
	m.keysOK.Set(1)
	m.reg.MustRegister(m.intake, m.quarantined, m.keysOK,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) count(provider, outcome string) {
	m.intake.WithLabelValues(provider, outcome).Inc()
}

// handler serves GET /metrics (behind the admin token).
func (m *metrics) handler() gin.HandlerFunc {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return func(c *gin.Context) { h.ServeHTTP(c.Writer, c.Request) }
}
