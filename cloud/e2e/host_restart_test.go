package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostLongPollSurvivesCloudRestart: the cloud is stopped (SIGTERM) and
// started again on the same address and database while an idle host with a
// 30 s interval long-polls. The stopping cloud answers the held poll at once;
// the host polls again at once, retries the refused connections with a short
// backoff, and long-polls the new cloud: a webhook accepted right after the
// restart reaches the handler well before the host's 30 s interval would
// have run out (5 s tells the two apart; the time is logged, not asserted).
func TestHostLongPollSurvivesCloudRestart(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "restart")
	rc := startReceiver(t)
	h := s.startConfiguredHost(t, s.cloud.url, forwardTo(rc.url, map[string]any{"heartbeat_interval_s": 30}))
	payload := hostPayload(t, "github/push.json")

	// A first webhook, handled and acked: the ack rides on the idle host's
	// long poll, which the cloud holds once it has applied the ack.
	first := sendGitHub(t, s.cloud.url, s.hostID, "push", "restart-1", payload)
	eventually(t, 20*time.Second, "first webhook acked", func() bool {
		return s.cloud.delivery(s.hostID, first).Delivery.Status == "acked"
	})

	stopAt := time.Now()
	require.NoError(t, s.cloud.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.cloud.done:
	case <-time.After(20 * time.Second):
		t.Fatal("cloud did not stop on SIGTERM")
	}
	require.NoError(t, s.cloud.exitErr, "a clean stop")
	stopped := time.Since(stopAt)
	s.cloud.start()
	s.cloud.waitReady()
	ready := time.Now()

	second := sendGitHub(t, s.cloud.url, s.hostID, "push", "restart-2", payload)
	accepted := time.Now()
	eventually(t, 5*time.Second, "webhook accepted after the restart delivered before the 30 s interval", func() bool {
		return rc.count() == 2
	})
	t.Logf("cloud stopped in %s, ready %s after SIGTERM; webhook delivered %s after it was accepted",
		stopped.Round(time.Millisecond), ready.Sub(stopAt).Round(time.Millisecond), time.Since(accepted).Round(time.Millisecond))
	eventually(t, 20*time.Second, "second webhook acked", func() bool {
		return s.cloud.delivery(s.hostID, second).Delivery.Status == "acked"
	})
	got := rc.snapshot()
	require.Len(t, got, 2)
	for id, reqs := range got {
		require.Len(t, reqs, 1, "%s handled once", id)
	}
	select {
	case <-h.done:
		t.Fatalf("host exited: %v", h.exitErr)
	default:
	}
}
