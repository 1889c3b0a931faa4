package localapi

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the host's Prometheus metrics, on the local API's own
// registry: handler durations as they happen, the rest read at each
// scrape.
type metrics struct {
	reg      *prometheus.Registry
	handlers *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		handlers: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_host_handler_duration_seconds",
			Help:    "Handler runs by source and result (success, error, skipped).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"source", "result"}),
	}
	m.reg.MustRegister(m.handlers, &scraped{s: s})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ObserveHandler records one handler run (agent.Options.Observe). Safe on
// a nil server, before one exists.
func (s *Server) ObserveHandler(source, result string, took time.Duration) {
	if s == nil {
		return
	}
	s.metrics.handlers.WithLabelValues(source, result).Observe(took.Seconds())
}

var (
	ledgerRowsDesc = prometheus.NewDesc("relay_host_ledger_rows", "Webhooks recorded in the ledger.", nil, nil)
	outboxDesc     = prometheus.NewDesc("relay_host_outbox_depth", "Outcomes (acks, nacks) not yet reported to the cloud.", nil, nil)
	backlogDesc    = prometheus.NewDesc("relay_host_backlog", "Leased webhooks waiting for a worker (queued) and running handlers (running).", []string{"state"}, nil)
	sinceDesc      = prometheus.NewDesc("relay_host_seconds_since_contact", "Seconds since the last successful exchange with the cloud (since the start when none yet).", nil, nil)
)

// scraped reads the ledger and the agent at each scrape.
type scraped struct{ s *Server }

func (c *scraped) Describe(ch chan<- *prometheus.Desc) {
	ch <- ledgerRowsDesc
	ch <- outboxDesc
	ch <- backlogDesc
	ch <- sinceDesc
}

func (c *scraped) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := c.s.ledger.DeliveryCount(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(ledgerRowsDesc, prometheus.GaugeValue, float64(n))
	}
	if n, err := c.s.ledger.OutboxCount(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(outboxDesc, prometheus.GaugeValue, float64(n))
	}
	queued, running := c.s.agent.Backlog()
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(queued), "queued")
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(running), "running")
	last := c.s.agent.LastHeartbeat()
	if last.IsZero() {
		last = c.s.started
	}
	ch <- prometheus.MustNewConstMetric(sinceDesc, prometheus.GaugeValue, c.s.clock.Since(last).Seconds())
}
