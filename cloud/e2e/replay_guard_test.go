package e2e

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReplayGuardEndToEnd: a signed GitHub webhook is delivered; the same
// body and signature under a new X-GitHub-Delivery is answered 2xx but not
// delivered, and `cloud ctl quarantine list` shows it held; released with
// `cloud ctl quarantine release ID`, it reaches the local app once.
func TestReplayGuardEndToEnd(t *testing.T) {
	eachEngineParallel(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL)
		const secret = "replay-secret"
		hostID, code := c.newHost("replay", secret)
		// The source with its replay guard on, as an operator sets it.
		require.Equal(t, 200, c.admin("PUT", "/api/hosts/"+hostID+"/sources/github", map[string]any{"secrets": []string{secret},
			"options": map[string]string{"replay_guard": "on"}}, nil))
		rc := startReceiver(t)
		claimAndStartHost(t, c.url, code, rc.url)

		p := githubPayloads(t)[0]
		original := signGitHub(secret, p.event, "replay-original", p.body)
		status, first, err := original.send(c.url, hostID)
		require.NoError(t, err)
		require.Equal(t, 200, status)
		require.Equal(t, "queued", first.Status)
		eventually(t, 30*time.Second, "the original delivered", func() bool { return rc.count() == 1 })

		// Captured and sent again: the same body and signature, a new id.
		replay := original
		replay.headers = map[string]string{}
		for k, v := range original.headers {
			replay.headers[k] = v
		}
		replay.headers["X-GitHub-Delivery"] = "replay-forged"
		status, answered, err := replay.send(c.url, hostID)
		require.NoError(t, err)
		require.Equal(t, 200, status, "answered as a stored webhook")
		require.Equal(t, "queued", answered.Status)
		require.Len(t, c.deliveries(hostID, ""), 1, "not stored as a delivery")

		out := ctlOK(t, c.url, "quarantine", "list")
		require.Contains(t, out, "1 requests quarantined")
		require.Contains(t, out, "replay")
		require.Contains(t, out, first.DeliveryID, "the reason names the earlier delivery")
		var list struct {
			Requests []struct {
				ID     int64  `json:"id"`
				Kind   string `json:"kind"`
				Reason string `json:"reason"`
			} `json:"requests"`
		}
		ctlJSON(t, c.url, &list, "quarantine", "list")
		require.Len(t, list.Requests, 1)
		require.Equal(t, "replay", list.Requests[0].Kind)
		require.Equal(t, 1, rc.count(), "held, not delivered")

		id := strconv.FormatInt(list.Requests[0].ID, 10)
		released := ctlOK(t, c.url, "quarantine", "release", id)
		require.Contains(t, released, "queued "+answered.DeliveryID, "the delivery the sender was told of")
		eventually(t, 30*time.Second, "the released webhook delivered", func() bool { return rc.count() == 2 })
		got := rc.snapshot()
		var forged []received
		for _, rs := range got {
			for _, r := range rs {
				if r.Header.Get("X-GitHub-Delivery") == "replay-forged" {
					forged = append(forged, r)
				}
			}
		}
		require.Len(t, forged, 1, "delivered once")
		require.Equal(t, p.body, forged[0].Body)
		require.Contains(t, ctlOK(t, c.url, "quarantine", "list"), "0 requests quarantined")

		// Released once: again is refused, and the replay sent again is a
		// duplicate of the released delivery.
		r := ctl(t, c.url, "", nil, "quarantine", "release", id)
		require.NotEqual(t, 0, r.code)
		status, again, err := replay.send(c.url, hostID)
		require.NoError(t, err)
		require.Equal(t, 200, status)
		require.Equal(t, "duplicate", again.Status)
		require.Len(t, c.deliveries(hostID, ""), 2)
		var trail struct {
			Events []struct {
				Reason string `json:"reason"`
			} `json:"events"`
		}
		require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+answered.DeliveryID, nil, &trail))
		b, _ := json.Marshal(trail)
		require.Contains(t, string(b), "released by an operator")
	})
}
