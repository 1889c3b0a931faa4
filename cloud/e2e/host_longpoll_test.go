package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostLongPollDeliversAtOnce: with an hour between heartbeats, an idle
// host still gets each webhook as soon as it arrives, because its
// heartbeats long-poll (wait_s) and the cloud answers one when work comes.
func TestHostLongPollDeliversAtOnce(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "longpoll")
	rc := startReceiver(t)
	h := s.startConfiguredHost(t, s.cloud.url, forwardTo(rc.url, map[string]any{"heartbeat_interval_s": 3600}))
	// Wait until the host's first heartbeat (its subscription) is in.
	eventually(t, 20*time.Second, "host seen by the cloud", func() bool {
		var hv struct {
			LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
		}
		s.cloud.admin("GET", "/api/hosts/"+s.hostID, nil, &hv)
		return hv.LastHeartbeatAt != nil
	})
	payloads := githubPayloads(t)
	for i := range 3 {
		p := payloads[i]
		w := signGitHub(secret, p.event, "lp-"+p.event, p.body)
		status, _, err := w.send(s.cloud.url, s.hostID)
		require.NoError(t, err)
		require.Equal(t, 200, status)
		// Far sooner than the hour the interval would take.
		eventually(t, 20*time.Second, "delivered while the host long-polls", func() bool { return rc.count() == i+1 })
	}
	require.NotContains(t, tail(h.logPath, 200), "heartbeat failed")
}
