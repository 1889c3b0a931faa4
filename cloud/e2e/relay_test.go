package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const secret = "e2e github secret"

// startRelay starts a cloud on dbURL with a host called name, claimed and
// running with a forward handler to a new receiver.
func startRelay(t *testing.T, dbURL, name string) (*cloud, string, *receiver) {
	t.Helper()
	c := startCloud(t, dbURL)
	hostID, code := c.newHost(name, secret)
	rc := startReceiver(t)
	claimAndStartHost(t, c.url, code, rc.url)
	return c, hostID, rc
}

// TestRelayEndToEnd sends 50 signed GitHub webhooks, built from real
// payloads, through the real cloud and host processes: each reaches the local
// receiver exactly once, byte-exact with GitHub's headers, and the cloud then
// lists every one as acked.
func TestRelayEndToEnd(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			c, hostID, rc := startRelay(t, newDB(t), "e2e-"+name)

			payloads := githubPayloads(t)
			sent := map[string]githubWebhook{} // delivery_id → webhook
			for i := 0; i < 50; i++ {
				p := payloads[i%len(payloads)]
				w := signGitHub(secret, p.event, fmt.Sprintf("e2e-%s-%04d", name, i), p.body)
				status, resp, err := w.send(c.url, hostID)
				require.NoError(t, err)
				require.Equal(t, 200, status)
				require.Equal(t, "queued", resp.Status)
				require.True(t, strings.HasPrefix(resp.DeliveryID, "github:"+w.delivery+":"), resp.DeliveryID)
				sent[resp.DeliveryID] = w
			}

			eventually(t, 60*time.Second, "50 deliveries acked", func() bool {
				return len(c.deliveries(hostID, "acked")) == 50
			})
			got := rc.snapshot()
			require.Len(t, got, 50, "each delivery reaches the receiver")
			for id, w := range sent {
				reqs := got[id]
				require.Len(t, reqs, 1, "delivery %s handled exactly once", id)
				r := reqs[0]
				require.Equal(t, w.body, r.Body, "body byte-exact")
				for k, v := range w.headers {
					require.Equal(t, v, r.Header.Get(k), "provider header %s", k)
				}
				require.Equal(t, id, r.Header.Get("X-Relay-Delivery-Id"))
				require.Equal(t, "github", r.Header.Get("X-Relay-Source"))
				require.Equal(t, "1", r.Header.Get("X-Relay-Attempt"))
			}
			// A provider redelivery of the same event is a duplicate, not new work.
			for id, w := range sent {
				status, resp, err := w.send(c.url, hostID)
				require.NoError(t, err)
				require.Equal(t, 200, status)
				require.Equal(t, "duplicate", resp.Status)
				require.Equal(t, id, resp.DeliveryID)
				break
			}
			require.Len(t, c.deliveries(hostID, ""), 50)
		})
	}
}

// TestHostCrashBeforeAck kills the host after its handler succeeded and the
// ledger recorded it, but before the ack reached the cloud. After a restart
// the ack is sent and the handler is not called again, although the lease
// expired meanwhile and the delivery was due for another attempt.
func TestHostCrashBeforeAck(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			c := startCloud(t, newDB(t), "RELAY_LEASE=1s")
			hostID, code := c.newHost("crash-"+name, secret)
			px := startProxy(t, strings.TrimPrefix(c.url, "http://"))
			rc := startReceiver(t)
			// The receiver cuts the host off from the cloud while it answers, so
			// the ack cannot go out.
			rc.before = func(*http.Request) { px.block() }
			h := claimAndStartHost(t, px.url(), code, rc.url)

			w := signGitHub(secret, "push", "crash-"+name, githubPayloads(t)[0].body)
			status, resp, err := w.send(c.url, hostID)
			require.NoError(t, err)
			require.Equal(t, 200, status)

			eventually(t, 30*time.Second, "handler ran", func() bool { return rc.count() == 1 })
			eventually(t, 30*time.Second, "ledger records success", func() bool { return h.ledgerResult(resp.DeliveryID) == "success" })
			h.kill()
			require.Equal(t, "", singleStatus(c, hostID, "acked"), "ack must not have reached the cloud yet")
			// Let the lease expire so the cloud offers the delivery again.
			eventually(t, 30*time.Second, "lease expired", func() bool { return singleStatus(c, hostID, "retrying") != "" })

			rc.before = nil
			px.unblock()
			h.restart()
			eventually(t, 30*time.Second, "delivery acked after restart", func() bool { return singleStatus(c, hostID, "acked") != "" })
			require.Equal(t, 1, rc.count(), "the handler ran exactly once")
		})
	}
}

// singleStatus returns the id of the host's one delivery if it has status.
func singleStatus(c *cloud, hostID, status string) string {
	ds := c.deliveries(hostID, status)
	if len(ds) == 1 {
		return ds[0].DeliveryID
	}
	return ""
}

// TestCloudCrashMidStream kills the cloud with SIGKILL while a provider is
// sending, and restarts it. The sender behaves like a provider: anything but
// a 2xx is retried with the same event id. Every event answered 2xx reaches
// the receiver exactly once. A heartbeat answer the kill cut short: the host
// says so in its next heartbeat and gets those deliveries again at once,
// long before their leases (the default 2 min) would end.
func TestCloudCrashMidStream(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			c, hostID, rc := startRelay(t, newDB(t), "cloudcrash-"+name)

			const total = 120
			payloads := githubPayloads(t)
			var accepted sync.Map // delivery header → delivery_id
			var sentOK atomic.Int32
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < total; i++ {
					p := payloads[i%len(payloads)]
					w := signGitHub(secret, p.event, fmt.Sprintf("cc-%s-%04d", name, i), p.body)
					for attempt := 0; ; attempt++ {
						status, resp, err := w.send(c.url, hostID)
						if err == nil && status == 200 {
							accepted.Store(w.delivery, resp.DeliveryID)
							sentOK.Add(1)
							break
						}
						if attempt > 1000 {
							t.Errorf("event %s never accepted", w.delivery)
							return
						}
						time.Sleep(10 * time.Millisecond) // provider retry backoff
					}
				}
			}()
			eventually(t, 30*time.Second, "some webhooks accepted", func() bool { return sentOK.Load() >= total/3 })
			c.restart() // SIGKILL, then start again on the same database
			<-done

			eventually(t, 90*time.Second, "every accepted webhook acked", func() bool {
				return len(c.deliveries(hostID, "acked")) == total
			})
			got := rc.snapshot()
			accepted.Range(func(k, v any) bool {
				require.Len(t, got[v.(string)], 1, "event %s handled exactly once", k)
				return true
			})
			require.Len(t, got, total)
		})
	}
}
