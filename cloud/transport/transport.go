// Package transport is the hosts' side of the cloud's wire: the long poll
// (POST /api/hosts/heartbeat) and the socket (GET /api/hosts/socket). Each
// decodes what a host sent (shared's shapes, checked by shared), hands it
// to the delivery core, and encodes the core's answer; the HTTP edge that
// mounts them authenticates the host and answers errors (Edge).
package transport

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// Edge is what the transports need of the HTTP edge that mounts them.
type Edge interface {
	// AuthHost is the active host a request's bearer token names, or an
	// unauthorized (or unavailable) *shared.Error.
	AuthHost(c *gin.Context) (*store.Host, error)
	// WriteError answers err: the edge's one error → status table.
	WriteError(c *gin.Context, err error)
	// DecodeJSON reads a JSON body of at most limit bytes into v.
	DecodeJSON(c *gin.Context, limit int64, v any) error
}

// Metrics counts what the transports wrote.
type Metrics interface {
	// Wrote counts n webhooks written to a host over transport in encoding
	// (one of SentEncodings[transport]).
	Wrote(transport, encoding string, n int)
}

// Config is the transports' dependencies and settings; all but
// OutgoingChanged are required.
type Config struct {
	Edge       Edge
	Deliveries *delivery.Service
	Conns      *delivery.Connections // the hosts' sockets across replicas
	Tokens     *auth.Tokens
	Metrics    Metrics
	Clock      clockwork.Clock
	Log        *slog.Logger
	// MaxHeartbeatReq bounds a heartbeat's body.
	MaxHeartbeatReq int64
	// HeartbeatFloor is the least interval a host is told to heartbeat at.
	HeartbeatFloor time.Duration
	// OutgoingChanged, if set, is told the body bytes leased and about to
	// be written to hosts, and when they were (see holdOutgoing).
	OutgoingChanged func(delta int64)
}

// Transports serves the hosts' long polls and sockets.
type Transports struct {
	cfg        Config
	edge       Edge
	deliveries *delivery.Service
	conns      *delivery.Connections
	tokens     *auth.Tokens
	metrics    Metrics
	clock      clockwork.Clock
	log        *slog.Logger
	wg         sync.WaitGroup // every socket's goroutine
}

// New returns the transports over cfg.
func New(cfg Config) *Transports {
	return &Transports{cfg: cfg, edge: cfg.Edge, deliveries: cfg.Deliveries, conns: cfg.Conns, tokens: cfg.Tokens,
		metrics: cfg.Metrics, clock: cfg.Clock, log: cfg.Log}
}

// Transports and encodings, the labels of relay_webhooks_sent_total: what
// really went on the wire. A long poll's answer is binary, JSON, or JSON
// gzip-compressed; a socket's webhooks frames are binary or JSON, each
// "+deflate" on a socket that agreed to permessage-deflate.
const (
	TransportSocket   = "socket"
	TransportLongPoll = "long_poll"
	encodingBinary    = "binary"
	encodingJSON      = "json"
	encodingGzip      = "gzip"
	deflateSuffix     = "+deflate"
)

// SentEncodings are the encodings each transport sends in.
var SentEncodings = map[string][]string{
	TransportLongPoll: {encodingBinary, encodingJSON, encodingGzip},
	TransportSocket:   {encodingBinary, encodingJSON, encodingBinary + deflateSuffix, encodingJSON + deflateSuffix},
}

// WaitSockets waits until every socket's handler returned (after the
// delivery core's StopWaiting closed them), or ctx ends: hijacked
// connections are not waited for by the HTTP server's Shutdown.
func (s *Transports) WaitSockets(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IntervalS is the heartbeat interval hosts are told, in whole seconds:
// by the long poll, the socket's welcome, and a claim's or token's answer.
func (s *Transports) IntervalS() int {
	return int((s.cfg.HeartbeatFloor + time.Second - 1) / time.Second)
}

// holdOutgoing tells Config.OutgoingChanged of the body bytes of ds, leased
// and about to be encoded and written to their host, and returns what tells
// it they are no longer held (once written, or not).
func (s *Transports) holdOutgoing(ds []*store.Delivery) (release func()) {
	var n int64
	for _, d := range ds {
		n += int64(len(d.RawBody))
	}
	changed := s.cfg.OutgoingChanged
	if changed == nil || n == 0 {
		return func() {}
	}
	changed(n)
	return func() { changed(-n) }
}
