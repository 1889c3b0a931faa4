package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostSocketDelivers: a host on the socket, with an hour between
// heartbeats, gets each webhook pushed as it arrives, and the cloud's audit
// trail names the socket: pushed, written, acked.
func TestHostSocketDelivers(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "socket")
	rc := startReceiver(t)
	h := s.startSocketHost(t, rc.url)
	payloads := githubPayloads(t)
	var ids []string
	for i := range 3 {
		p := payloads[i]
		ids = append(ids, sendGitHub(t, s.cloud.url, s.hostID, p.event, "ws-"+p.event, p.body))
		eventually(t, 20*time.Second, "pushed over the socket", func() bool { return rc.count() == i+1 })
	}
	for _, id := range ids {
		eventually(t, 20*time.Second, "acked over the socket", func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })
		d := s.cloud.delivery(s.hostID, id)
		require.Equal(t, 1, d.Delivery.Attempts, d.reasons())
		require.Equal(t, "→queued: received | queued→delivering: pushed over the host's socket | delivering→delivered: written to the host | delivered→acked: acked by host", d.reasons())
	}
	log := tail(h.logPath, 400)
	require.NotContains(t, log, "heartbeat failed")
	require.NotContains(t, log, "socket unavailable")
}

// startSocketHost starts a host on the socket, with an hour between
// heartbeats, forwarding GitHub's webhooks to forwardURL, and waits until
// its socket is connected.
func (s *hostSetup) startSocketHost(t *testing.T, forwardURL string) *host {
	t.Helper()
	h := s.startConfiguredHost(t, s.cloud.url, forwardTo(forwardURL, map[string]any{"transport": "websocket", "heartbeat_interval_s": 3600}))
	h.waitSocket()
	return h
}

// waitSocket waits until the host's log says its socket connected.
func (h *host) waitSocket() {
	h.t.Helper()
	eventually(h.t, 20*time.Second, "socket connected", func() bool { return strings.Contains(tail(h.logPath, 200), "socket connected") })
}

// upgradeProxy is a reverse proxy in front of the cloud that refuses
// WebSocket upgrades (as a proxy that strips Upgrade does) until allowed.
type upgradeProxy struct {
	allow    atomic.Bool
	refused  atomic.Int64
	upgraded atomic.Int64
	url      string
}

func startUpgradeProxy(t *testing.T, target string) *upgradeProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &upgradeProxy{}
	p.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			if !p.allow.Load() {
				p.refused.Add(1)
				http.Error(w, "upgrades not allowed here", http.StatusBadRequest)
				return
			}
			p.upgraded.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	return p
}

// TestHostSocketFallback: behind a proxy that refuses upgrades, a host on
// transport auto heartbeats (long-polls) and every webhook still arrives;
// once upgrades pass, it moves to the socket by itself.
func TestHostSocketFallback(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "socket-fallback")
	px := startUpgradeProxy(t, s.cloud.url)
	rc := startReceiver(t)
	h := s.startConfiguredHost(t, px.url, forwardTo(rc.url, map[string]any{"transport": "auto", "heartbeat_interval_s": 3600}))
	eventually(t, 20*time.Second, "socket refused", func() bool { return px.refused.Load() > 0 })
	eventually(t, 20*time.Second, "heartbeats instead", func() bool {
		return strings.Contains(tail(h.logPath, 200), "socket unavailable; heartbeats meanwhile")
	})
	payloads := githubPayloads(t)
	sendGitHub(t, s.cloud.url, s.hostID, payloads[0].event, "fb-0", payloads[0].body)
	eventually(t, 20*time.Second, "delivered by heartbeat", func() bool { return rc.count() == 1 })

	px.allow.Store(true)
	// The socket is tried again after 2 s, then 4 s (±50 %): well within
	// this.
	eventually(t, 30*time.Second, "socket connected once upgrades pass", func() bool {
		return strings.Contains(tail(h.logPath, 400), "socket connected")
	})
	require.Positive(t, px.upgraded.Load())
	sendGitHub(t, s.cloud.url, s.hostID, payloads[1].event, "fb-1", payloads[1].body)
	eventually(t, 20*time.Second, "delivered over the socket", func() bool { return rc.count() == 2 })
	for key, rs := range rc.snapshot() {
		require.Len(t, rs, 1, "handled once: %s", key)
	}
}

// TestHostSocketCutMidBatch: the network cuts the socket while a batch is
// pushed and handlers run; the host connects again, and every webhook is
// handled exactly once and acked.
func TestHostSocketCutMidBatch(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "socket-cut")
	px := startProxy(t, strings.TrimPrefix(s.cloud.url, "http://"))
	rc := startReceiver(t)
	var seen atomic.Int64
	var cutOnce sync.Once
	cut := make(chan struct{})
	rc.before = func(*http.Request) {
		// Slow handlers: the batch is in flight when the cut comes.
		if seen.Add(1) == 5 {
			cutOnce.Do(func() { close(cut) })
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := s.startConfiguredHost(t, px.url(), map[string]any{
		"transport": "websocket",
		"workers":   2,
		"webhooks":  map[string]any{"github": map[string]any{"enabled": true, "forward": rc.url, "parallel": true}},
	})
	h.waitSocket()
	body := hostPayload(t, "github/push.json")
	const n = 40
	ids := make([]string, n)
	for i := range n {
		ids[i] = sendGitHub(t, s.cloud.url, s.hostID, "push", fmt.Sprintf("cut-%02d", i), body)
	}
	select {
	case <-cut:
	case <-time.After(20 * time.Second):
		t.Fatal("handlers never started")
	}
	px.block() // every open connection dies
	px.unblock()
	for _, id := range ids {
		eventually(t, 60*time.Second, "acked after the cut", func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })
	}
	snap := rc.snapshot()
	require.Len(t, snap, n)
	for key, rs := range snap {
		require.Len(t, rs, 1, "handled once: %s", key)
	}
	// Cut, then connected again.
	require.GreaterOrEqual(t, strings.Count(tail(h.logPath, 1000), "socket connected"), 2)
	// Idle on its socket, the host (heartbeat interval 1 s) stays healthy:
	// it pings at its interval, and each pong is a contact.
	// (Checked here, not in require.Never: its checks run in goroutines
	// that can outlive it and find the host already stopped by cleanup.
	// The window stays real: what it watches is the host process's
	// intervals, on its own clock, which no test can fake.)
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, "ok", h.health().Status)
	}
}

// TestHostSocketDeactivated: deactivating a host closes its socket at once
// and the host stops, refused.
func TestHostSocketDeactivated(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "socket-deactivated")
	rc := startReceiver(t)
	h := s.startSocketHost(t, rc.url)
	require.Equal(t, 200, s.cloud.admin("POST", "/api/hosts/"+s.hostID+"/deactivate", nil, nil))
	require.NotEqual(t, 0, h.waitExit(10*time.Second))
	require.Contains(t, tail(h.logPath, 20), "host credential refused by the cloud")
	require.Contains(t, tail(s.cloud.logPath, 400), "host deactivated or re-claimed")
}

// TestHostSocketKilledAfterLedgerBeforeAck: the host dies with its outcome
// committed and the ack not sent; the cloud sees the socket close and hands
// the webhook out again at once, and after the restart it is acked from the
// outbox without the handler running again.
func TestHostSocketKilledAfterLedgerBeforeAck(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "socket-crash")
	runs := newRunLog(t)
	handler := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT" >> "$1"
`)
	h := s.startConfiguredHost(t, s.cloud.url, execTo([]string{handler, string(runs)}, map[string]any{"transport": "websocket"}),
		"RELAY_HOST_TEST_CRASH=after-ledger")
	id := sendGitHub(t, s.cloud.url, s.hostID, "push", "sc-crash", hostPayload(t, "github/push.json"))
	require.Equal(t, -1, h.waitExit(30*time.Second))
	eventually(t, 10*time.Second, "released when the cloud saw the socket close", func() bool {
		return s.cloud.delivery(s.hostID, id).Delivery.Status == "retrying"
	})
	require.Contains(t, s.cloud.delivery(s.hostID, id).reasons(), "delivered→retrying: the socket carrying it closed")

	h.restartWith()
	eventually(t, 30*time.Second, "acked after the restart", func() bool {
		return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked"
	})
	require.Equal(t, []string{id + " 1"}, runs.lines(), "the handler ran once")
}

// TestHostSocketBodiesByteExact: over the socket (binary webhooks frames
// between these binaries), bodies reach the receiver exactly as sent: not
// UTF-8 at all, CRLF JSON with escapes, empty, and a 300 KB push among
// small ones in the same frames. A host with compress gets the same frames
// through permessage-deflate.
func TestHostSocketBodiesByteExact(t *testing.T) {
	t.Parallel()
	bodiesByteExactBothWays(t, "websocket", "binary+deflate")
}

// TestHostLongPollBodiesByteExact: the same over heartbeats, whose answers
// are binary between these binaries, and JSON gzip-compressed to a host
// with compress.
func TestHostLongPollBodiesByteExact(t *testing.T) {
	t.Parallel()
	bodiesByteExactBothWays(t, "heartbeat", "gzip")
}

// bodiesByteExactBothWays runs bodiesByteExact for a host as set by
// default (sent binary) and for one with compress (sent in compressed).
func bodiesByteExactBothWays(t *testing.T, transport, compressed string) {
	for _, tc := range []struct {
		name, encoding string
		compress       bool
	}{{"binary", "binary", false}, {"compress", compressed, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bodiesByteExact(t, transport, tc.compress, tc.encoding)
		})
	}
}

// bodiesByteExact sends odd bodies to a host on transport (its config's
// compress set), checks they arrive as sent, and that the cloud sent every
// one in encoding (its /metrics).
func bodiesByteExact(t *testing.T, transport string, compress bool, encoding string) {
	c := startCloud(t, "sqlite:"+filepath.Join(t.TempDir(), "cloud.db"))
	hostID, code := c.newHost(transport+"-bytes", secret)
	require.Equal(t, 201, c.admin("PUT", "/api/hosts/"+hostID+"/sources/internal",
		map[string]any{"provider": "generic", "secrets": []string{"internal-secret"}}, nil))
	rc := startReceiver(t)
	h := startHost(t, c.url, code, map[string]any{
		"transport":            transport,
		"compress":             compress,
		"heartbeat_interval_s": 3600,
		"webhooks": map[string]any{
			"github":   map[string]any{"enabled": true, "forward": rc.url},
			"internal": map[string]any{"enabled": true, "forward": rc.url},
		},
	})
	if transport == "websocket" {
		h.waitSocket()
	}

	big := []byte(`{"ref":"refs/heads/main","commits":[` + strings.Repeat(`{"id":"6f1c2d3e","message":"caf\u00e9 \\u2665\r\n"},`, 300<<10/50) + `{}]}`)
	bodies := map[string][]byte{
		"bin":   {0x00, 0xff, 0xfe, 0x80, '\r', '\n', 0xc3, 0x28, 0x00},
		"empty": {},
		"crlf":  []byte("{\r\n  \"text\": \"caf\\u00E9 \\u2665\",\r\n  \"n\": 1.0\r\n}\r\n"),
		"big":   big,
		"small": []byte(`{"zen":"Keep it logically awesome."}`),
	}
	want := map[string][]byte{}
	for name, body := range bodies {
		m := hmac.New(sha256.New, []byte("internal-secret"))
		m.Write(body)
		req, _ := http.NewRequest("POST", c.url+"/api/webhooks/"+hostID+"/internal", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
		req.Header.Set("X-Event-Id", "sock-"+name)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 202, resp.StatusCode, name)
		want["internal:sock-"+name] = body
	}
	want[sendGitHub(t, c.url, hostID, "push", "sock-push", big)] = big
	eventually(t, 30*time.Second, "all acked", func() bool { return len(c.deliveries(hostID, "acked")) == len(want) })
	got := rc.snapshot()
	for prefix, body := range want {
		var seen []received
		for id, v := range got {
			if strings.HasPrefix(id, prefix) {
				seen = v
			}
		}
		require.Len(t, seen, 1, prefix)
		require.True(t, bytes.Equal(body, seen[0].Body), "%s: %d bytes sent, %d received", prefix, len(body), len(seen[0].Body))
	}
	log := tail(h.logPath, 400)
	require.NotContains(t, log, "heartbeat failed")
	if transport == "websocket" {
		require.NotContains(t, log, "socket unavailable")
		require.NotContains(t, log, "socket lost")
	}

	// Sent in encoding: every webhook, none in another.
	wire := map[string]string{"websocket": "socket", "heartbeat": "long_poll"}[transport]
	m := c.metrics()
	sent := func(encoding string) float64 {
		return metricValue(m, `relay_webhooks_sent_total{encoding="`+encoding+`",transport="`+wire+`"}`)
	}
	require.Equal(t, float64(len(want)), sent(encoding), "webhooks sent %s over %s", encoding, wire)
	others := map[string][]string{"socket": {"binary", "json", "binary+deflate", "json+deflate"}, "long_poll": {"binary", "json", "gzip"}}[wire]
	for _, e := range others {
		if e != encoding {
			require.Zero(t, sent(e), "none sent %s over %s", e, wire)
		}
	}
}
