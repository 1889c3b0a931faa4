package e2e

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// otlpCollector is an in-process OTLP/HTTP trace collector: it keeps each
// export's body.
type otlpCollector struct {
	mu     sync.Mutex
	url    string
	bodies [][]byte
}

func startCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			c.mu.Lock()
			c.bodies = append(c.bodies, b)
			c.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	return c
}

// exported says whether some export from service carried traceID.
func (c *otlpCollector) exported(service string, traceID [16]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bodies {
		if bytes.Contains(b, []byte(service)) && bytes.Contains(b, traceID[:]) {
			return true
		}
	}
	return false
}

// TestTraceparentEndToEnd: a provider's traceparent is continued at
// intake and reaches the forward receiver as a traceparent header; a
// webhook sent without one starts a trace that reaches an exec handler as
// TRACEPARENT. Both binaries log each trace id with the correlation id,
// and export their spans to an OTLP collector.
func TestTraceparentEndToEnd(t *testing.T) {
	t.Parallel()
	const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	collector := startCollector(t)
	otel := "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.url
	s := newHostSetup(t, "traces", otel)
	require.Equal(t, 201, s.cloud.admin("PUT", "/api/hosts/"+s.hostID+"/sources/slack",
		map[string]any{"secrets": []string{slackSecret}}, nil))
	rc := startReceiver(t)
	out := t.TempDir()
	dump := script(t, `printf '%s' "$TRACEPARENT" > "$1/$RELAY_DELIVERY_ID.tp"`+"\n")
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{"webhooks": map[string]any{
		"github": map[string]any{"enabled": true, "forward": rc.url},
		"slack":  map[string]any{"enabled": true, "exec": []string{dump, out}},
	}}, otel)

	const providerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	gh := signGitHub(secret, "push", "trace-1", hostPayload(t, "github/push.json"))
	gh.headers["traceparent"] = providerTP
	status, resp, err := gh.send(s.cloud.url, s.hostID)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	slackID := sendSlack(t, s.cloud.url, s.hostID, "slack", slackSecret, hostPayload(t, "slack/event_callback.message.json"))

	var forwarded string
	eventually(t, 30*time.Second, "the forward receiver got the webhook", func() bool {
		for _, got := range rc.snapshot() {
			for _, r := range got {
				forwarded = r.Header.Get("Traceparent")
			}
		}
		return forwarded != ""
	})
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", shared.TraceIDOf(forwarded), "the provider's trace, continued")
	require.NotEqual(t, providerTP, forwarded, "under spans of the relay's own")

	tpFile := filepath.Join(out, slackID+".tp")
	eventually(t, 30*time.Second, "the exec handler ran", func() bool {
		b, err := os.ReadFile(tpFile)
		return err == nil && len(b) > 0
	})
	b, err := os.ReadFile(tpFile)
	require.NoError(t, err)
	slackTrace := shared.TraceIDOf(string(b))
	require.NotEmpty(t, slackTrace, "TRACEPARENT is a traceparent: %q", b)
	require.NotEqual(t, "4bf92f3577b34da6a3ce929d0e0e4736", slackTrace, "a trace of its own")

	// Both binaries log each trace id beside the delivery and its
	// correlation id.
	for _, want := range []struct{ id, trace string }{{resp.DeliveryID, "4bf92f3577b34da6a3ce929d0e0e4736"}, {slackID, slackTrace}} {
		eventually(t, 30*time.Second, "the host logged "+want.id, func() bool {
			return logLine(h.logPath, want.id, "webhook processed") != ""
		})
		for name, path := range map[string]string{"cloud": s.cloud.logPath, "host": h.logPath} {
			line := logLine(path, want.id, "trace_id=")
			require.Contains(t, line, "trace_id="+want.trace, "%s log: %s", name, line)
			require.Contains(t, line, "correlation_id=", "%s log: %s", name, line)
		}
	}

	// And export their spans: intake, store and lease from the cloud, the
	// handler from the host.
	for _, tr := range []string{"4bf92f3577b34da6a3ce929d0e0e4736", slackTrace} {
		var id [16]byte
		_, err := hex.Decode(id[:], []byte(tr))
		require.NoError(t, err)
		eventually(t, 30*time.Second, "spans of "+tr+" from both binaries", func() bool {
			return collector.exported("relay-cloud", id) && collector.exported("relay-host", id)
		})
	}
}

// logLine returns the first line of a log that has every one of parts.
func logLine(path string, parts ...string) string {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line
		}
	}
	return ""
}
