package main

import (
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
)

// connAllowance is what Go's memory limit grows by for each connection the
// cloud holds open. Measured with 2,000 of each and no limit, once
// collected: an idle WebSocket holds 18–19 KiB of the runtime's memory
// (two goroutines' stacks, 13 KiB, and 5–6 KiB of heap: the connection,
// its buffers, the session), a held long poll 29–30 KiB (20 KiB of stacks,
// its handler's deep in the HTTP server's and gin's frames, and 9 KiB of
// heap: the request, its context and timers, 4 KiB buffers each way). The
// limit's base leaves the collector its room above them.
const connAllowance = 40 << 10

// memLimit sets Go's soft memory limit (debug.SetMemoryLimit) for the
// embedded cloud: what its runtime holds — heap, goroutine stacks and its
// own structures, not SQLite's page cache or the binary — may grow to
//
//	base + request bodies intake holds + connAllowance × connections open
//
// Bodies in flight and held connections are memory the cloud must keep:
// a limit below them would have the collector run back to back for
// nothing (a flat 32 MiB kept it busy 48–54 % of a core with 2,000 idle
// sockets, and 133 % with 2,000 long polls). What is left, base less what
// an idle cloud holds (14–15 MiB), is the room the collector works in,
// besides what each connection's allowance leaves over. GOGC stays as
// it is (100 unless set): far from the limit, the collector runs as it
// would without one, and only near it sooner.
//
// One memLimit decides; intake tells it the bytes it holds (inflight) and
// the listener (listener) the connections it accepts and sees closed.
type memLimit struct {
	base, perConn int64
	set           func(int64) int64 // debug.SetMemoryLimit

	mu       sync.Mutex
	inflight int64 // request-body bytes intake holds
	conns    int64 // connections open
	last     int64 // the limit last set
}

// newMemLimit returns the limit of mb MiB of base (applied at once), or
// nil when there is none: mb is 0, GOMEMLIMIT is in the environment (the
// runtime applies it itself), or the database is not SQLite. On Postgres
// the cloud's Go memory at 256 senders is 45–55 MiB of its own (the
// driver's buffers), and a 32 MiB limit doubled its CPU per webhook
// (451–536 µs against 218–279).
func newMemLimit(mb int, databaseURL string, getenv func(string) (string, bool)) *memLimit {
	if _, ok := getenv("GOMEMLIMIT"); ok || mb <= 0 || !strings.HasPrefix(databaseURL, "sqlite:") {
		return nil
	}
	m := &memLimit{base: int64(mb) << 20, perConn: connAllowance, set: debug.SetMemoryLimit}
	m.mu.Lock()
	m.apply()
	m.mu.Unlock()
	return m
}

// apply sets the limit if it changed; m.mu is held.
func (m *memLimit) apply() {
	if l := m.base + m.inflight + m.conns*m.perConn; l != m.last {
		m.last = l
		m.set(l)
	}
}

// inflightFunc returns what intake tells the bytes it holds in all
// (server.Config.InflightChanged); nil without a limit.
func (m *memLimit) inflightFunc() func(bytes int64) {
	if m == nil {
		return nil
	}
	return func(bytes int64) {
		m.mu.Lock()
		m.inflight = bytes
		m.apply()
		m.mu.Unlock()
	}
}

// connsChanged counts d more connections open.
func (m *memLimit) connsChanged(d int64) {
	m.mu.Lock()
	m.conns += d
	m.apply()
	m.mu.Unlock()
}

// listener returns ln counting its connections from Accept to their first
// Close: those the HTTP server serves or keeps alive between requests, and
// those it hands over (hijacked WebSockets), which it no longer tracks
// (http.Server's ConnState says StateHijacked and nothing after), until
// they are closed. ln itself without a limit.
func (m *memLimit) listener(ln net.Listener) net.Listener {
	if m == nil {
		return ln
	}
	return &countingListener{Listener: ln, m: m}
}

type countingListener struct {
	net.Listener
	m *memLimit
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.m.connsChanged(1)
	return &countedConn{Conn: c, m: l.m}, nil
}

// countedConn is counted out at its first Close.
type countedConn struct {
	net.Conn
	m      *memLimit
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.m.connsChanged(-1)
	}
	return err
}
