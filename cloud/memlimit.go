package main

import (
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// outgoingFactor is what Go's memory limit grows by for each body byte of
// the leased deliveries the cloud is writing to hosts. A batch (up to
// 4 MiB of bodies) is held whole while it is written: the bodies, their
// JSON (base64 of each raw body and, for a host that takes it, the parsed
// copy: about 2⅓ times the bodies), on a socket the copy json.Marshal
// hands back and the compressor's output, on a heartbeat the gzip
// writer's — some 6 times the bodies at once — and the collector needs
// room above what is live, as GOGC gives it. Under a limit that counted
// none of it (22 MiB), a drain of 20,000 on SQLite ran the collector 3.3
// times as often (889 cycles against 270) and had the runtime return
// 1.4 GiB to the system to fault it back (23 MiB without the limit): twice
// the cloud's CPU per delivery. At 8, one drain over each transport ran
// 288 and 285 cycles and released 119 and 134 MiB (without a limit 277 and
// 249, 17 and 18 MiB); at 4, 363 and 320, and 631 and 469 MiB.
const outgoingFactor = 8

// outgoingWindow is how long the most held at once counts: see outgoing.
const outgoingWindow = 10 * time.Second

// memLimit sets Go's soft memory limit (debug.SetMemoryLimit) for the
// embedded cloud: what its runtime holds — heap, goroutine stacks and its
// own structures, not SQLite's page cache or the binary — may grow to
//
//	base + request bodies intake holds
//	     + outgoingFactor × bodies being written to hosts (recent most)
//	     + connAllowance × connections open
//
// Bodies in flight, a drain's batches and held connections are memory
// the cloud must keep:
// a limit below them would have the collector run back to back for
// nothing (a flat 32 MiB kept it busy 48–54 % of a core with 2,000 idle
// sockets, and 133 % with 2,000 long polls). What is left, base less what
// an idle cloud holds (14–15 MiB), is the room the collector works in,
// besides what each connection's allowance leaves over. GOGC stays as
// it is (100 unless set): far from the limit, the collector runs as it
// would without one, and only near it sooner.
//
// One memLimit decides; intake tells it the bytes it holds (inflight),
// the server the bodies it is writing to hosts (outgoing), and the
// listener (listener) the connections it accepts and sees closed.
type memLimit struct {
	base, perConn int64
	set           func(int64) int64 // debug.SetMemoryLimit
	now           func() time.Time  // the cloud's clock

	mu       sync.Mutex
	inflight int64 // request-body bytes intake holds
	conns    int64 // connections open
	out      outgoing
	last     int64 // the limit last set
}

// newMemLimit returns the limit of mb MiB of base (applied at once), or
// nil when there is none: mb is 0, GOMEMLIMIT is in the environment (the
// runtime applies it itself), or the database is not SQLite. On Postgres
// the cloud's Go memory at 256 senders is 45–55 MiB of its own (the
// driver's buffers), and a 32 MiB limit doubled its CPU per webhook
// (451–536 µs against 218–279).
func newMemLimit(mb int, databaseURL string, getenv func(string) (string, bool), now func() time.Time) *memLimit {
	if _, ok := getenv("GOMEMLIMIT"); ok || mb <= 0 || !strings.HasPrefix(databaseURL, "sqlite:") {
		return nil
	}
	m := &memLimit{base: int64(mb) << 20, perConn: connAllowance, set: debug.SetMemoryLimit, now: now}
	m.mu.Lock()
	m.apply()
	m.mu.Unlock()
	return m
}

// apply sets the limit if it changed; m.mu is held.
func (m *memLimit) apply() {
	if l := m.base + m.inflight + m.out.allowance() + m.conns*m.perConn; l != m.last {
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
		m.out.changed(0, m.now()) // a drain's allowance ends with its windows
		m.apply()
		m.mu.Unlock()
	}
}

// outgoingFunc returns what the server tells the body bytes of leased
// deliveries it holds while it encodes and writes them, as changes
// (server.Config.OutgoingChanged); nil without a limit.
func (m *memLimit) outgoingFunc() func(delta int64) {
	if m == nil {
		return nil
	}
	return func(delta int64) {
		m.mu.Lock()
		m.out.changed(delta, m.now())
		m.apply()
		m.mu.Unlock()
	}
}

// outgoing is what the limit allows for the bodies being written to hosts:
// outgoingFactor times the most held at once over the last outgoingWindow
// to two (the current window and the one before it). A drain holds its
// batches one after another, each for the moment it is encoded and
// written: a limit that fell back between them would have the collector
// run, and the runtime return memory to the system, only to take it back
// for the next batch. The windows move on at each change of it and of the
// bodies intake holds: a drain over, intake's peak is held as before.
type outgoing struct {
	held     int64     // body bytes held now
	peak     int64     // the most held since start
	prevPeak int64     // the most held in the window before
	start    time.Time // the current window's; zero before the first change
}

// changed applies a change of what is held, at now.
func (o *outgoing) changed(delta int64, now time.Time) {
	o.held += delta
	if since := now.Sub(o.start); o.start.IsZero() || since >= outgoingWindow {
		// The window is over: it becomes the one before, unless a whole
		// window passed since with no change (then nothing was held in it
		// but what is held now).
		o.prevPeak = 0
		if !o.start.IsZero() && since < 2*outgoingWindow {
			o.prevPeak = o.peak
		}
		o.peak, o.start = o.held, now
	}
	o.peak = max(o.peak, o.held)
}

func (o *outgoing) allowance() int64 { return outgoingFactor * max(o.peak, o.prevPeak) }

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
