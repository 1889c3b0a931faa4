package server

import (
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// open per client address (addrKey of the peer's address: an IPv4
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
	return &connLimiter{Listener: ln, max: max, open: map[string]int{}, refused: s.metrics.connsRefused}
}

type connLimiter struct {
	net.Listener
	max     int
	refused prometheus.Counter

	mu   sync.Mutex
	open map[string]int // address → connections open; no entry when none
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := peerKey(c.RemoteAddr())
		l.mu.Lock()
		ok := l.open[key] < l.max
		if ok {
			l.open[key]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, l: l, key: key}, nil
		}
		l.refused.Inc()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: nothing kept in TIME_WAIT for a flood
		}
		c.Close()
	}
}

func (l *connLimiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// peerKey is addrKey of a connection's peer address.
func peerKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return addrKey(ta.IP.String())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return addrKey(host)
}

// limitedConn gives its place back when it is closed (once, however many
// times Close is called).
type limitedConn struct {
	net.Conn
	l    *connLimiter
	key  string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
