package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostStopsGracefullyOnSIGTERM: on SIGTERM the host takes no new work,
// lets the running handler finish, hands back the webhook still waiting
// behind it (the source runs in order), sends the ack and the nack in a last
// report (on a socket, over it before closing it) and exits 0, over either
// transport. The cloud makes what was handed back due at once, its attempt
// given back, and the restarted host handles it.
func TestHostStopsGracefullyOnSIGTERM(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"websocket", "heartbeat"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			s := newHostSetup(t, "sigterm-"+transport)
			runs := newRunLog(t)
			started := filepath.Join(t.TempDir(), "started")
			handler := script(t, `echo "$RELAY_DELIVERY_ID" >> "$1"
touch "$2"
sleep 2
`)
			h := s.startConfiguredHost(t, s.cloud.url, execTo([]string{handler, string(runs), started}, map[string]any{"transport": transport}))
			first := sendGitHub(t, s.cloud.url, s.hostID, "push", "term-1", hostPayload(t, "github/push.json"))
			second := sendGitHub(t, s.cloud.url, s.hostID, "push", "term-2", hostPayload(t, "github/push.json"))
			eventually(t, 30*time.Second, "first handler running, second waiting", func() bool {
				_, err := os.Stat(started)
				return err == nil && h.health().Queued == 1
			})
			require.NoError(t, h.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, h.waitExit(30*time.Second), tail(h.logPath, 30))

			d := s.cloud.delivery(s.hostID, first)
			require.Equal(t, "acked", d.Delivery.Status, "the running handler finished and its ack was flushed: %s", d.reasons())
			d = s.cloud.delivery(s.hostID, second)
			require.Equal(t, "retrying", d.Delivery.Status, d.reasons())
			require.Equal(t, "host stopping: not started", d.Delivery.LastError, d.reasons())
			require.Equal(t, []string{first}, runs.lines())
			if transport == "websocket" {
				require.NotContains(t, tail(h.logPath, 50), "by heartbeat", "the last report went over the socket")
			}
			e, ok := h.ledgerShow(first)
			require.True(t, ok)
			require.Equal(t, "success", e.Result)

			var back struct {
				Delivery struct {
					Attempts    int        `json:"attempts"`
					MaxAttempts int        `json:"max_attempts"`
					NextRetryAt *time.Time `json:"next_retry_at"`
				} `json:"delivery"`
				Events []struct {
					At     time.Time `json:"at"`
					Reason string    `json:"reason"`
				} `json:"events"`
			}
			require.Equal(t, 200, s.cloud.admin("GET", "/api/hosts/"+s.hostID+"/webhooks/"+second, nil, &back))
			handedBack := back.Events[len(back.Events)-1]
			require.Equal(t, "handed back by the host, not started", handedBack.Reason, d.reasons())
			require.NotNil(t, back.Delivery.NextRetryAt)
			require.True(t, back.Delivery.NextRetryAt.Equal(handedBack.At),
				"due at the hand-back (%s), not after the schedule's delay (%s)", handedBack.At, back.Delivery.NextRetryAt)
			require.Equal(t, 1, back.Delivery.Attempts)
			require.Equal(t, 6, back.Delivery.MaxAttempts, "the attempt given back")

			h.start()
			eventually(t, 30*time.Second, "the webhook handed back is handled after the restart", func() bool {
				return s.cloud.delivery(s.hostID, second).Delivery.Status == "acked"
			})
			require.Equal(t, []string{first, second}, runs.lines())
		})
	}
}

// TestHostRevokedStops: deactivating a host in the cloud makes its running
// agent stop with a clear message and exit code 3.
func TestHostRevokedStops(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "revoked")
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{"webhooks": map[string]any{}})
	eventually(t, 30*time.Second, "first heartbeat", func() bool { return h.health().LastHeartbeatAt != nil })
	require.Equal(t, 200, s.cloud.admin("POST", "/api/hosts/"+s.hostID+"/deactivate", nil, nil))
	require.Equal(t, 3, h.waitExit(30*time.Second))
	require.Contains(t, tail(h.logPath, 5), "host credential refused by the cloud (host deactivated or revoked); claim the host again")
}

// TestHostConfigErrors runs the real binary on each class of bad
// configuration: each is named clearly and exits 2, with and without
// --check; a good configuration passes --check --offline.
func TestHostConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	require.NoError(t, os.MkdirAll(state, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(state, "credentials.json"),
		[]byte(`{"cloud_url": "http://127.0.0.1:9", "host_id": "h_1", "host_credential": "c"}`), 0o600))
	hostRun := func(config string, extra ...string) (int, string) {
		path := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
		cmd := exec.Command(filepath.Join(binDir, "host"), append([]string{"run", "--config", path}, extra...)...)
		cmd.Env = append(os.Environ(), "RELAY_HOST_STATE="+state, "RELAY_HOST_LISTEN=127.0.0.1:0")
		return runExit(t, cmd)
	}
	src := func(body string) string { return `{"webhooks": {"github": ` + body + `}}` }
	for name, c := range map[string]struct{ config, want string }{
		"unknown key":         {`{"webhook": {}}`, `unknown top-level key "webhook"`},
		"unknown source key":  {src(`{"enabled": true, "forward": "http://127.0.0.1:3000", "forwrad": "x"}`), `webhooks.github: unknown key "forwrad"`},
		"wrong type":          {src(`{"enabled": "true", "forward": "http://127.0.0.1:3000"}`), `webhooks.github.enabled: want true or false, got "true"`},
		"bad cloud url":       {`{"cloud_url": "relay.example.com"}`, `cloud_url: invalid URL "relay.example.com": scheme must be http or https`},
		"bad forward url":     {src(`{"enabled": true, "forward": "localhost:3000/x"}`), `webhooks.github.forward: invalid URL`},
		"no handler":          {src(`{"enabled": true}`), `webhooks.github: enabled but has no handler`},
		"both handlers":       {src(`{"enabled": true, "forward": "http://127.0.0.1:3000", "exec": ["./x"]}`), `webhooks.github: set only one of forward and exec`},
		"bad event name":      {src(`{"enabled": true, "forward": "http://127.0.0.1:3000", "events": ["pull request"]}`), `webhooks.github.events[0]: invalid event name "pull request"`},
		"partial wildcard":    {src(`{"enabled": true, "forward": "http://127.0.0.1:3000", "events": ["pull_request.*"]}`), `the only wildcard is "*" on its own`},
		"route without event": {src(`{"enabled": true, "routes": [{"exec": ["./x"]}]}`), `webhooks.github.routes[0].events: a route needs its events`},
		"unreachable route":   {src(`{"enabled": true, "events": ["push"], "routes": [{"events": ["issues"], "exec": ["./x"]}]}`), `"issues" is not in the source's events`},
		"not json":            {`{"webhooks": `, `invalid JSON`},
	} {
		for _, check := range []bool{false, true} {
			var extra []string
			if check {
				extra = []string{"--check"}
			}
			code, out := hostRun(c.config, extra...)
			require.Equal(t, 2, code, "%s (check=%v): %s", name, check, out)
			require.Contains(t, out, c.want, "%s (check=%v)", name, check)
		}
	}
	code, out := hostRun(src(`{"enabled": true, "forward": "http://127.0.0.1:3000/gh"}`), "--check", "--offline")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "configuration OK")
	require.Contains(t, out, "host h_1, cloud http://127.0.0.1:9, state "+state, "the state dir comes from RELAY_HOST_STATE")
}
