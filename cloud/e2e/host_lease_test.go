package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostLongHandlerKeepsItsLease runs a handler for 15 s under a 3 s lease
// (heartbeat every 1 s): the host extends the lease in each heartbeat, so
// the cloud never hands the webhook out again while it runs, and it is
// acked on its first attempt. This stands for the agent tasks that take
// minutes under the default 2 min lease.
func TestHostLongHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "long", "RELAY_LEASE=3s")
	runs := newRunLog(t)
	started := filepath.Join(t.TempDir(), "started")
	handler := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT" >> "$1"
touch "$2"
sleep 15
echo "task finished"
`)
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{"webhooks": map[string]any{
		"github": map[string]any{"enabled": true, "exec": []string{handler, string(runs), started}, "timeout_s": 60},
	}})
	id := sendGitHub(t, s.cloud.url, s.hostID, "push", "long-task", hostPayload(t, "github/push.json"))
	eventually(t, 30*time.Second, "handler started", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	begun := time.Now()

	// While it runs: the lease keeps moving ahead of the clock, the delivery
	// never goes back to retrying, and the host reports it running.
	var leases []time.Time
	for time.Since(begun) < 12*time.Second {
		var v struct {
			Delivery struct {
				Status       string     `json:"status"`
				Attempts     int        `json:"attempts"`
				LeaseExpires *time.Time `json:"lease_expires_at"`
			} `json:"delivery"`
		}
		require.Equal(t, 200, s.cloud.admin("GET", "/api/hosts/"+s.hostID+"/webhooks/"+id, nil, &v))
		require.Contains(t, []string{"delivering", "delivered"}, v.Delivery.Status, "leased throughout")
		require.Equal(t, 1, v.Delivery.Attempts)
		require.NotNil(t, v.Delivery.LeaseExpires)
		leases = append(leases, *v.Delivery.LeaseExpires)
		require.Equal(t, 1, h.health().Running)
		time.Sleep(time.Second)
	}
	require.True(t, leases[len(leases)-1].After(begun.Add(10*time.Second)),
		"extended well past the first 3 s lease: %v … %v", leases[0], leases[len(leases)-1])

	eventually(t, 30*time.Second, "acked", func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })
	d := s.cloud.delivery(s.hostID, id)
	require.Equal(t, 1, d.Delivery.Attempts, d.reasons())
	require.NotContains(t, d.reasons(), "lease expired")
	require.Equal(t, []string{id + " 1"}, runs.lines(), "ran once")
	e := mustLedger(t, h, id)
	require.Equal(t, "success", e.Result)
	require.Equal(t, "task finished", e.Output)
}
