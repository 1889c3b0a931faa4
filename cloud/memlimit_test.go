package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testDB = "sqlite:./data/cloud.db"

func noEnv(string) (string, bool) { return "", false }

func TestMemLimitOff(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(math.MaxInt64)

	withEnv := func(k string) (string, bool) { return "64MiB", k == "GOMEMLIMIT" }
	for name, m := range map[string]*memLimit{
		"0: no limit":                 newMemLimit(0, testDB, noEnv, time.Now),
		"SQLite only":                 newMemLimit(24, "postgres://relay@db/relay", noEnv, time.Now),
		"GOMEMLIMIT is the runtime's": newMemLimit(24, testDB, withEnv, time.Now),
	} {
		require.Nil(t, m, name)
		require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), name)
		require.Nil(t, m.inflightFunc(), name)
		require.Nil(t, m.outgoingFunc(), name)
		ln := &net.TCPListener{}
		require.Same(t, ln, m.listener(ln).(*net.TCPListener), name)
	}
}

func TestMemLimitSetsTheRuntimes(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	gogc := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(gogc) })

	m := newMemLimit(24, testDB, noEnv, time.Now)
	require.NotNil(t, m)
	require.Equal(t, int64(24<<20), debug.SetMemoryLimit(-1))
	m.inflightFunc()(5 << 20)
	m.connsChanged(2)
	require.Equal(t, int64(29<<20+2*connAllowance), debug.SetMemoryLimit(-1))
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC is left as it is")
}

// fakeLimit is a memLimit whose settings are sent on a channel.
func fakeLimit(base int64) (*memLimit, chan int64) {
	set := make(chan int64, 1024)
	return &memLimit{base: base, perConn: connAllowance, set: func(l int64) int64 { set <- l; return 0 }, now: time.Now}, set
}

func TestMemLimitSizing(t *testing.T) {
	m, set := fakeLimit(24 << 20)
	inflight := m.inflightFunc()
	inflight(5 << 20)
	require.Equal(t, int64(29<<20), <-set, "raised by the bodies in flight")
	m.connsChanged(1)
	m.connsChanged(1)
	require.Equal(t, int64(29<<20+connAllowance), <-set)
	require.Equal(t, int64(29<<20+2*connAllowance), <-set, "and by each connection")
	inflight(0)
	require.Equal(t, int64(24<<20+2*connAllowance), <-set)
	m.connsChanged(-2)
	require.Equal(t, int64(24<<20), <-set)
	inflight(0)
	require.Empty(t, set, "set only when it changes")

	// 2,000 held connections and 256 senders' bodies.
	m.connsChanged(2000)
	inflight(256 * 15 << 10)
	<-set
	require.Equal(t, int64(24<<20+2000*connAllowance+256*15<<10), <-set)
}

// waitLimit reads the limits set until want, failing after 10 s.
func waitLimit(t *testing.T, set chan int64, want int64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var last int64
	for {
		select {
		case last = <-set:
			if last == want {
				return
			}
		case <-timeout:
			t.Fatalf("limit %d, want %d", last, want)
		}
	}
}

func TestMemLimitCountsConnections(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "TLS"}[tls], func(t *testing.T) { testCountsConnections(t, tls) })
	}
}

// testCountsConnections serves HTTP (over TLS, as cloud serve's ServeTLS
// does: the listener counted is under the TLS one) and counts what it
// accepts until it is closed.
func testCountsConnections(t *testing.T, useTLS bool) {
	const base = 24 << 20
	m, set := fakeLimit(base)
	conns := func(n int64) int64 { return base + n*connAllowance }

	var mu sync.Mutex
	var hijacked []net.Conn
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		mu.Lock()
		hijacked = append(hijacked, c)
		mu.Unlock()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = brw.Flush()
	})
	ts := httptest.NewUnstartedServer(mux)
	ts.Listener = m.listener(ts.Listener)
	dial := func() (net.Conn, error) { return net.Dial("tcp", ts.Listener.Addr().String()) }
	if useTLS {
		ts.StartTLS()
		roots := x509.NewCertPool()
		roots.AddCert(ts.Certificate())
		dial = func() (net.Conn, error) {
			return tls.Dial("tcp", ts.Listener.Addr().String(), &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		}
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)

	// request sends a request on a new connection and reads the answer's
	// status line: the server has accepted the connection by then.
	request := func(path string) (net.Conn, string) {
		c, err := dial()
		require.NoError(t, err)
		_, err = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: test\r\n\r\n")
		require.NoError(t, err)
		line, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err)
		return c, line
	}

	var kept []net.Conn
	for range 5 {
		c, line := request("/")
		require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
		kept = append(kept, c)
	}
	waitLimit(t, set, conns(5)) // kept alive between requests
	var upgraded []net.Conn
	for range 2 {
		c, line := request("/upgrade")
		require.Equal(t, "HTTP/1.1 101 Switching Protocols\r\n", line)
		upgraded = append(upgraded, c)
	}
	waitLimit(t, set, conns(7))

	for _, c := range kept {
		require.NoError(t, c.Close())
	}
	waitLimit(t, set, conns(2)) // the HTTP server closed its ends
	for _, c := range upgraded {
		require.NoError(t, c.Close())
	}
	// The server no longer tracks a hijacked connection: it stays counted
	// until whoever took it closes it, once however many times.
	mu.Lock()
	require.Len(t, hijacked, 2)
	require.NoError(t, hijacked[0].Close())
	_ = hijacked[0].Close()
	mu.Unlock()
	waitLimit(t, set, conns(1))
	mu.Lock()
	require.NoError(t, hijacked[1].Close())
	mu.Unlock()
	waitLimit(t, set, conns(0))
	require.Empty(t, set)
}

// BenchmarkMemLimitConn is a connection opened and closed, the runtime's
// limit set each time.
func BenchmarkMemLimitConn(b *testing.B) {
	old := debug.SetMemoryLimit(-1)
	b.Cleanup(func() { debug.SetMemoryLimit(old) })
	m := newMemLimit(22, testDB, noEnv, time.Now)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.connsChanged(1)
			m.connsChanged(-1)
		}
	})
}

func TestMemLimitOutgoing(t *testing.T) {
	m, set := fakeLimit(22 << 20)
	now := time.Unix(1_700_000_000, 0)
	m.now = func() time.Time { return now }
	out := m.outgoingFunc()
	const batch = 4 << 20

	out(batch)
	require.Equal(t, int64(22<<20+outgoingFactor*batch), <-set, "raised by what the drain holds")
	now = now.Add(100 * time.Millisecond)
	out(-batch)
	require.Empty(t, set, "and stays raised once it is written")
	// Batch after batch, smaller ones and two at once.
	for range 5 {
		now = now.Add(outgoingWindow / 4)
		out(batch / 2)
		out(-batch / 2)
	}
	require.Empty(t, set, "up to a window after the biggest")
	now = now.Add(outgoingWindow / 4)
	out(batch)
	out(batch)
	require.Equal(t, int64(22<<20+outgoingFactor*2*batch), <-set)
	out(-batch)
	out(-batch)

	// Smaller batches: the allowance falls to them after two windows.
	now = now.Add(outgoingWindow)
	out(batch / 4)
	out(-batch / 4)
	require.Empty(t, set, "the window before still counts")
	now = now.Add(outgoingWindow)
	out(batch / 4)
	require.Equal(t, int64(22<<20+outgoingFactor*batch/4), <-set)
	out(-batch / 4)

	// The drain over, a change after two windows of none forgets them.
	now = now.Add(2 * outgoingWindow)
	out(1 << 10)
	require.Equal(t, int64(22<<20+outgoingFactor<<10), <-set)
	out(-1 << 10)
	require.Empty(t, set)

	// With intake's bodies and connections, all add up.
	m.inflightFunc()(5 << 20)
	m.connsChanged(3)
	<-set
	require.Equal(t, int64(27<<20+outgoingFactor<<10+3*connAllowance), <-set)
}

// A drain over, intake's bodies alone move the windows on: the drain's
// allowance does not outlast them.
func TestMemLimitOutgoingEndsWithIntake(t *testing.T) {
	m, set := fakeLimit(22 << 20)
	now := time.Unix(1_700_000_000, 0)
	m.now = func() time.Time { return now }
	out, inflight := m.outgoingFunc(), m.inflightFunc()
	out(4 << 20)
	out(-4 << 20)
	require.Equal(t, int64(22<<20+outgoingFactor*4<<20), <-set)
	now = now.Add(outgoingWindow)
	inflight(1 << 20)
	require.Equal(t, int64(23<<20+outgoingFactor*4<<20), <-set, "the window before still counts")
	now = now.Add(outgoingWindow)
	inflight(2 << 20)
	require.Equal(t, int64(24<<20), <-set, "two windows on, only intake's bodies")
}
