package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawConn opens a connection to the cloud from the local address ip, so
// that the limits per address see it apart from the test's other clients
// (any of 127.0.0.0/8 is loopback on Linux).
func rawConn(t *testing.T, ip, cloudURL string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(cloudURL, "http://"))
	if err == nil {
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	}
	return c, err
}

func readAnswer(c net.Conn) (*http.Response, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestEdgeLimitsEndToEnd: cloud serve's per-address connection limit and
// in-flight body budget, set from the environment.
func TestEdgeLimitsEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCloud(t, "sqlite:"+filepath.Join(t.TempDir(), "cloud.db"),
		"RELAY_MAX_CONNS_PER_IP=3", "RELAY_INTAKE_INFLIGHT_IP_MB=1")
	hostID, _ := c.newHost("edge", "s")

	// Connections: three from one address serve, a fourth is reset.
	for i := range 3 {
		conn, err := rawConn(t, "127.0.0.3", c.url)
		require.NoError(t, err)
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
		require.NoError(t, err)
		resp, err := readAnswer(conn)
		require.NoError(t, err, "connection %d", i)
		require.Equal(t, 200, resp.StatusCode)
	}
	if conn, err := rawConn(t, "127.0.0.3", c.url); err == nil {
		_, _ = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
		_, err = readAnswer(conn)
		require.Error(t, err, "a fourth connection from the address is closed")
	}
	eventually(t, 10*time.Second, "the refusal counted", func() bool {
		return metricValue(c.metrics(), "relay_connections_refused_total") == 1
	})

	// Bodies: one address's declared 1 MiB holds its whole share, so its
	// next webhook waits, then gets 503 with Retry-After.
	held, err := rawConn(t, "127.0.0.4", c.url)
	require.NoError(t, err)
	_, err = fmt.Fprintf(held, "POST /api/webhooks/%s/github HTTP/1.1\r\nHost: relay\r\nX-GitHub-Event: push\r\nContent-Length: %d\r\n\r\n", hostID, 1<<20)
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the held body's bytes reserved", func() bool {
		return metricValue(c.metrics(), "relay_intake_body_bytes_in_flight") == 1<<20
	})
	w := signGitHub("s", "push", "d-1", []byte(`{"ref":"refs/heads/main"}`))
	next, err := rawConn(t, "127.0.0.4", c.url)
	require.NoError(t, err)
	req := fmt.Sprintf("POST /api/webhooks/%s/github HTTP/1.1\r\nHost: relay\r\nContent-Length: %d\r\n", hostID, len(w.body))
	for k, v := range w.headers {
		req += k + ": " + v + "\r\n"
	}
	_, err = io.WriteString(next, req+"\r\n"+string(w.body))
	require.NoError(t, err)
	resp, err := readAnswer(next)
	require.NoError(t, err)
	require.Equal(t, 503, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))

	// Another address is not starved, and the held body's bytes are given
	// back when it is cut off.
	code, _, err := w.send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	held.Close()
	eventually(t, 10*time.Second, "the budget given back", func() bool {
		return metricValue(c.metrics(), "relay_intake_body_bytes_in_flight") == 0
	})
	require.Contains(t, c.metrics(), `relay_intake_requests_total{outcome="over_budget",provider="github"} 1`)
}

// metrics reads GET /metrics.
func (c *cloud) metrics() string {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return string(b)
}

// metricValue is the value of an unlabelled metric in Prometheus's text
// format; -1 when it is not there.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
