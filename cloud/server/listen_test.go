package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dialFrom opens a TCP connection to addr from the local address ip (any
// of 127.0.0.0/8 is loopback on Linux).
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends one raw request on c and reads its answer; err when the
// connection was closed instead.
func roundTrip(c net.Conn, req string) (*http.Response, error) {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

const healthz = "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"

func served(c net.Conn) bool {
	resp, err := roundTrip(c, healthz)
	return err == nil && resp.StatusCode == 200
}

// closedByServer waits (at most 10 s) for the server to close c, reading
// whatever it sent first; it fails on the client's own deadline.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(c)
	if err != nil {
		require.False(t, os.IsTimeout(err), "the server kept the connection open: %v", err)
	}
	return string(got)
}

func TestConnsPerIPLimited(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hs := httptest.NewUnstartedServer(b.srv.Handler())
	hs.Listener = b.srv.LimitConnsPerIP(hs.Listener, 2)
	hs.Start()
	t.Cleanup(hs.Close)
	addr := hs.Listener.Addr().String()

	c1, c2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	require.True(t, served(c1))
	require.True(t, served(c2))
	// A third from the address is reset as soon as it is accepted (its
	// dial may already see the reset).
	if c3, err := net.Dial("tcp", addr); err == nil {
		defer c3.Close()
		require.False(t, served(c3), "a third connection from the address is closed at once")
		closedByServer(t, c3)
	}
	require.Contains(t, string(b.admin("GET", "/metrics", nil).body), "\nrelay_connections_refused_total 1\n")

	// Another address has its own count.
	require.True(t, served(dialFrom(t, "127.0.0.2", addr)))
	// Both connections still serve; once one closes, its place is free.
	require.True(t, served(c1))
	require.True(t, served(c2))
	c1.Close()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		return served(c)
	}, 10*time.Second, 5*time.Millisecond, "c1's place is given back")

	l := b.srv.LimitConnsPerIP(hs.Listener, 0)
	require.Same(t, hs.Listener, l, "0 is no limit")
}

// Slow clients are cut off: headers by ReadHeader, a body by Read, an
// idle connection by Idle; over-long headers are refused.
func TestSlowClientsCutOff(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = NewHTTPServer(b.srv.Handler(), Timeouts{
		ReadHeader: 100 * time.Millisecond, Read: 300 * time.Millisecond, Write: 5 * time.Second,
		Idle: 200 * time.Millisecond, MaxHeaderBytes: 4 << 10,
	}, nil)
	hs.Start()
	t.Cleanup(hs.Close)
	addr := hs.Listener.Addr().String()

	// Headers that never end.
	c := dialFrom(t, "127.0.0.1", addr)
	_, err := io.WriteString(c, "POST /api/webhooks/"+hostID+"/github HTTP/1.1\r\nHost: relay\r\nX-A: b\r\n")
	require.NoError(t, err)
	require.Empty(t, closedByServer(t, c), "cut off without an answer")

	// A body that never ends: the read fails, the request ends and gives
	// its bytes back.
	c = dialFrom(t, "127.0.0.1", addr)
	_, err = io.WriteString(c, "POST /api/webhooks/"+hostID+"/github HTTP/1.1\r\nHost: relay\r\nContent-Length: 100000\r\n\r\n{\"a\":")
	require.NoError(t, err)
	got := closedByServer(t, c)
	require.True(t, got == "" || strings.HasPrefix(got, "HTTP/1.1 400 "), got)
	b.waitInUse(0)

	// A connection left idle after its request.
	c = dialFrom(t, "127.0.0.1", addr)
	require.True(t, served(c))
	closedByServer(t, c)

	// Headers over the limit (net/http allows 4 KiB more than it).
	c = dialFrom(t, "127.0.0.1", addr)
	resp, err := roundTrip(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: "+strings.Repeat("x", 16<<10)+"\r\n\r\n")
	if err == nil {
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	} else {
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the server kept reading: %v", err)
	}
}
