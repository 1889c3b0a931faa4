package server

import (
	"log"
	"net"
	"net/http"
	"time"

	"github.com/relaykit/relay/cloud/limits"
)

// Timeouts bound how long a slow client may hold a connection.
type Timeouts struct {
	ReadHeader time.Duration // request line and headers, from the first byte
	// Read is a whole request, body included: a bound on a body sent slowly
	// (and on the in-flight budget it holds).
	Read time.Duration
	// Write runs from the end of the headers to the end of the answer: it
	// must exceed the longest heartbeat wait (Config.MaxWait, 25 s).
	Write          time.Duration
	Idle           time.Duration // a kept-alive connection between requests
	MaxHeaderBytes int           // request line and headers
}

// DefaultTimeouts are cloud serve's. A provider's body of up to 25 MiB
// gets two minutes, a header 10 s; heartbeats are held at most 25 s.
var DefaultTimeouts = Timeouts{
	ReadHeader:     10 * time.Second,
	Read:           2 * time.Minute,
	Write:          2 * time.Minute,
	Idle:           2 * time.Minute,
	MaxHeaderBytes: 64 << 10,
}

// NewHTTPServer returns an http.Server for h with the timeouts t.
func NewHTTPServer(h http.Handler, t Timeouts, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    t.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
}

// LimitConnsPerIP returns a listener that keeps at most max connections
// open per client address (limits.AddrKey of the peer's address: an IPv4
// address, an IPv6 /64). A connection past that is closed as soon as it
// is accepted, and counted in relay_connections_refused_total. max <= 0
// returns ln itself.
//
// The peer is whoever opened the connection: behind a proxy or load
// balancer, the proxy, whose connections the limit must then allow for.
func (s *Server) LimitConnsPerIP(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return limits.LimitConns(ln, max, s.metrics.connsRefused.Inc)
}
