package server

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/limits"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/transport"
	"github.com/relaykit/relay/cloud/verify"
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
	intake5xx   atomic.Uint64 // intake requests answered 5xx (alert.RuleIntake5xx)
	exchanges   prometheus.Counter
	leased      prometheus.Counter
	attempts    prometheus.Histogram
	ackLatency  *prometheus.HistogramVec
	expiries    prometheus.Counter
	// connsRefused counts connections closed for the per-address limit.
	connsRefused prometheus.Counter
	// sent counts webhooks written to hosts, by transport and encoding.
	sent *prometheus.CounterVec
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
	m.exchanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_host_exchanges_total",
		Help: "Heartbeats (and other transports' exchanges) served to hosts.",
	})
	m.leased = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_deliveries_pushed_total",
		Help: "Deliveries handed out to hosts (each attempt).",
	})
	m.attempts = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "relay_delivery_attempt",
		Help:    "The attempt number of each delivery handed out: attempts per delivery.",
		Buckets: []float64{1, 2, 3, 4, 5, 7, 10, 20, 50},
	})
	m.ackLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "relay_delivery_ack_latency_seconds",
		Help:    "From receipt to the host's ack, by provider (a source named after no provider counts as custom).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14),
	}, []string{"provider"})
	m.expiries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_lease_expiries_total",
		Help: "Leases that ended without an ack (failed attempts).",
	})
	m.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_webhooks_sent_total",
		Help: "Webhooks written to hosts, by transport (socket, long_poll) and encoding (binary, json; gzip for the long poll; binary+deflate, json+deflate for a socket with permessage-deflate).",
	}, []string{"transport", "encoding"})
	for t, es := range transport.SentEncodings {
		for _, e := range es {
			m.sent.WithLabelValues(t, e)
		}
	}
	m.keysOK.Set(1)
	m.reg.MustRegister(m.sent)
	m.reg.MustRegister(m.exchanges, m.leased, m.attempts, m.ackLatency, m.expiries)
	m.reg.MustRegister(m.intake, m.quarantined, m.keysOK, m.batchSize, m.commitTime, m.connsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Count counts an intake request of provider by outcome (intake.Metrics).
func (m *metrics) Count(provider, outcome string) {
	m.intake.WithLabelValues(provider, outcome).Inc()
	switch outcome {
	case intake.OutcomeUnavailable, intake.OutcomeQuarantineFull, intake.OutcomeQuarantineRateLimited:
		m.intake5xx.Add(1)
	}
}

// QuarantineAdded, SetQuarantined and KeysOK follow the quarantine and
// the key ring (intake.Metrics).
func (m *metrics) QuarantineAdded()     { m.quarantined.Inc() }
func (m *metrics) SetQuarantined(n int) { m.quarantined.Set(float64(n)) }
func (m *metrics) KeysOK(ok bool) {
	if ok {
		m.keysOK.Set(1)
	} else {
		m.keysOK.Set(0)
	}
}

// Wrote counts n webhooks written to a host over transport in encoding
// (one of transport.SentEncodings[transport]).
func (m *metrics) Wrote(transport, encoding string, n int) {
	if n == 0 {
		return
	}
	m.sent.WithLabelValues(transport, encoding).Add(float64(n))
}

// Exchanged counts a host exchange (delivery.Observer).
func (m *metrics) Exchanged(string) { m.exchanges.Inc() }

// Leased counts deliveries handed out and their attempts (delivery.Observer).
func (m *metrics) Leased(ds []*store.Delivery) {
	m.leased.Add(float64(len(ds)))
	for _, d := range ds {
		m.attempts.Observe(float64(d.Attempts))
	}
}

// Acked observes each acked delivery's time from receipt, which its id
// carries ({source}:{event id}:{received ms}); the provider is the
// source's name when that names one (bounded: the providers, and custom).
func (m *metrics) Acked(ids []string, now time.Time) {
	for _, id := range ids {
		source, rest, ok := strings.Cut(id, ":")
		i := strings.LastIndexByte(rest, ':')
		if !ok || i < 0 {
			continue
		}
		ms, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil {
			continue
		}
		provider := "custom"
		if p, ok := verify.Lookup(source); ok {
			provider = p.Name()
		}
		m.ackLatency.WithLabelValues(provider).Observe(max(0, now.Sub(time.UnixMilli(ms)).Seconds()))
	}
}

// ObserveLeaseExpiries counts leases that ended without an ack.
func (s *Server) ObserveLeaseExpiries(n int) { s.metrics.expiries.Add(float64(n)) }

// Intake5xx is how many intake requests this server answered with a 5xx.
func (s *Server) Intake5xx() uint64 { return s.metrics.intake5xx.Load() }

// RegisterMetrics adds collectors to what GET /metrics serves.
func (s *Server) RegisterMetrics(cs ...prometheus.Collector) {
	s.metrics.reg.MustRegister(cs...)
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

// replicasGauge is relay_replicas: the replicas sharing the store as this
// one's roll call last counted them (1 with one replica by design).
func (s *Server) replicasGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_replicas",
		Help: "Replicas sharing the store, this one included, as its roll call last counted them (1 on embedded SQLite); answered long polls park where it is 1.",
	}, func() float64 {
		if s.rollCall == nil {
			return 1
		}
		return float64(s.rollCall.Counted())
	})
}

// bodyGauge reports the bytes held, as relay_intake_body_bytes_in_flight.
func bodyGauge(b *limits.BodyBudget) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_intake_body_bytes_in_flight",
		Help: "Request-body bytes intake holds at once (reserved before they are read).",
	}, func() float64 {
		n, _, _ := b.InUse()
		return float64(n)
	})
}
