package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/verify"
)

// sinkEndpoint is a local endpoint alerts are sent to: a Standard Webhooks
// receiver (it verifies each signature, as a relay would) or a fake Slack.
type sinkEndpoint struct {
	mu     sync.Mutex
	url    string
	secret string // set once the sink is created: what verifies
	got    []map[string]any
	bad    []string // requests that did not verify
}

func startSinkEndpoint(t *testing.T) *sinkEndpoint {
	e := &sinkEndpoint{}
	e.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.secret != "" {
			standard, _ := verify.Lookup("standard")
			if err := standard.Verify(&verify.Request{Header: r.Header, Body: body}, [][]byte{[]byte(e.secret)}, nil); err != nil {
				e.bad = append(e.bad, err.Error())
				w.WriteHeader(401)
				return
			}
		}
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			e.bad = append(e.bad, "not JSON: "+string(body))
		}
		e.got = append(e.got, v)
	})) + "/alerts"
	return e
}

// typed returns the Standard Webhooks notifications' "type rule host".
func (e *sinkEndpoint) typed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range e.got {
		data, _ := n["data"].(map[string]any)
		out = append(out, fmt.Sprintf("%v %v %v", n["type"], data["rule"], data["host_id"]))
	}
	return out
}

// texts returns the Slack messages.
func (e *sinkEndpoint) texts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range e.got {
		out = append(out, fmt.Sprint(n["text"]))
	}
	return out
}

func containsPrefix(list []string, want string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, want) {
			return true
		}
	}
	return false
}

// TestHostOfflineAlert: a host is killed while webhooks arrive; an
// "offline with work waiting" alert reaches a Standard Webhooks receiver,
// signature verified, and a fake Slack; the host comes back, drains its
// webhooks, and both get the resolved notice. The host shows offline, then
// online with its history, and the cloud's metrics count the notifications.
func TestHostOfflineAlert(t *testing.T) {
	eachEngineParallel(t, func(t *testing.T, dbURL string) {
		// The sinks' endpoints are on loopback, which sinks reach only
		// when allowed.
		c := startCloud(t, dbURL, "RELAY_ALERT_INTERVAL=1s", "RELAY_HOST_LATE_AFTER=2s", "RELAY_HOST_OFFLINE_AFTER=3s",
			"RELAY_ALERT_SINK_ALLOW=127.0.0.1")
		standard, slack := startSinkEndpoint(t), startSinkEndpoint(t)
		var sink struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		}
		require.Equal(t, 201, c.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": standard.url}, &sink))
		require.Regexp(t, "^whsec_", sink.Secret)
		standard.mu.Lock()
		standard.secret = sink.Secret
		standard.mu.Unlock()
		require.Equal(t, 201, c.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "slack", "url": slack.url}, nil))

		const secret = "alerts-secret"
		hostID, code := c.newHost("edge-box", secret)
		rc := startReceiver(t)
		h := claimAndStartHost(t, c.url, code, rc.url)
		presence := func() string {
			var v struct {
				Presence string `json:"presence"`
			}
			require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID, nil, &v))
			return v.Presence
		}
		eventually(t, 30*time.Second, "host online", func() bool { return presence() == "online" })
		// Killed once its socket is in place, and the webhooks sent once
		// the cloud let go of it: one that came in between would be
		// pushed to the dying socket, an attempt that is given back.
		eventually(t, 30*time.Second, "the host's socket connected", func() bool {
			b, _ := os.ReadFile(h.logPath)
			return strings.Contains(string(b), `msg="socket connected"`)
		})
		h.kill()
		eventually(t, 30*time.Second, "the cloud's end of the socket closed", func() bool {
			b, _ := os.ReadFile(c.logPath)
			return strings.Contains(string(b), `msg="socket closed" host=`+hostID)
		})
		payloads := githubPayloads(t)
		for i := range 3 {
			w := signGitHub(secret, payloads[0].event, fmt.Sprintf("offline-%d", i), payloads[0].body)
			status, _, err := w.send(c.url, hostID)
			require.NoError(t, err)
			require.Equal(t, 200, status)
		}
		want := "alert.firing host_offline_with_work " + hostID
		eventually(t, 60*time.Second, "the offline alert at both sinks", func() bool {
			return containsPrefix(standard.typed(), want) && containsPrefix(slack.texts(), ":rotating_light: *Firing* `host_offline_with_work`")
		})
		require.Equal(t, "offline", presence())
		metrics := scrape(t, c.url, adminToken)
		require.Contains(t, metrics, `relay_host_pending_deliveries{host="`+hostID+`"} 3`)
		require.Contains(t, metrics, `relay_host_oldest_pending_seconds{host="`+hostID+`"}`)
		require.Contains(t, metrics, `relay_alerts_firing{rule="host_offline_with_work"} 1`)
		require.Contains(t, metrics, "relay_alert_evaluator 1")
		require.Contains(t, metrics, "\nrelay_replicas 1\n", "alone on its store, either engine")
		require.Contains(t, metrics, `relay_hosts{presence="offline"} 1`)
		require.Contains(t, metrics, `relay_host_offline_seconds{host="`+hostID+`"}`)
		require.Contains(t, strings.Join(slack.texts(), "\n"), "Host edge-box ("+hostID+"): offline since")
		require.Contains(t, strings.Join(slack.texts(), "\n"), "with 3 webhooks waiting")
		var alerts struct {
			Firing []struct {
				Rule   string `json:"rule"`
				HostID string `json:"host_id"`
			} `json:"firing"`
		}
		require.Equal(t, 200, c.admin("GET", "/api/alerts", nil, &alerts))
		require.Contains(t, alerts.Firing, struct {
			Rule   string `json:"rule"`
			HostID string `json:"host_id"`
		}{"host_offline_with_work", hostID})

		h.start()
		eventually(t, 60*time.Second, "the webhooks delivered and the alert resolved at both sinks", func() bool {
			return rc.count() == 3 && containsPrefix(standard.typed(), "alert.resolved host_offline_with_work "+hostID) &&
				containsPrefix(slack.texts(), ":white_check_mark: *Resolved* `host_offline_with_work`")
		})
		got := standard.typed()
		require.Equal(t, 1, strings.Count(strings.Join(got, "\n"), want), "fired once: %v", got)
		standard.mu.Lock()
		require.Empty(t, standard.bad, "every notification verified")
		standard.mu.Unlock()

		var v struct {
			Presence        string `json:"presence"`
			PresenceHistory []struct {
				From    string  `json:"from"`
				To      string  `json:"to"`
				LastedS float64 `json:"lasted_s"`
			} `json:"presence_history"`
		}
		eventually(t, 30*time.Second, "presence history back online", func() bool {
			require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID, nil, &v))
			return len(v.PresenceHistory) > 0 && v.PresenceHistory[0].To == "online" && v.PresenceHistory[0].From == "offline"
		})
		require.Greater(t, v.PresenceHistory[0].LastedS, 0.0)

		eventually(t, 30*time.Second, "the backlog gauge gone", func() bool {
			return !strings.Contains(scrape(t, c.url, adminToken), `relay_host_pending_deliveries{host="`+hostID+`"}`)
		})
		metrics = scrape(t, c.url, adminToken)
		require.Contains(t, metrics, `relay_alert_notifications_total{kind="webhook",result="sent"}`)
		require.Contains(t, metrics, `relay_alert_notifications_total{kind="slack",result="sent"}`)
		require.Contains(t, metrics, `relay_alerts_firing{rule="host_offline_with_work"} 0`)
		require.Contains(t, metrics, `relay_delivery_ack_latency_seconds_count{provider="github"} 3`)
		require.Contains(t, metrics, `relay_delivery_attempt_count 3`)
		require.Contains(t, metrics, `relay_hosts{presence="online"} 1`)
		require.Regexp(t, `relay_host_exchanges_total [1-9]`, metrics)
		// The upkeep's jobs, each from the start (a pass runs at once).
		require.Regexp(t, `relay_sweep_rows_total\{job="retention"\} \d`, metrics)
		require.Regexp(t, `relay_sweep_seconds_total\{job="lease expiry"\} \d`, metrics)
		require.Contains(t, metrics, `relay_sweep_failures_total{job="count folding"} 0`)

		// The host's own metrics moved with the webhooks it handled.
		hm := scrape(t, "http://"+h.listen, "")
		require.Contains(t, hm, `relay_host_handler_duration_seconds_count{result="success",source="github"} 3`)
		require.Contains(t, hm, "relay_host_ledger_rows 3")
		require.Contains(t, hm, "relay_host_outbox_depth ")
		require.Contains(t, hm, "relay_host_seconds_since_contact ")
	})
}

// scrape reads a /metrics page.
func scrape(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, string(b))
	return string(b)
}
