package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// claimInto claims s's host into a fresh state directory and returns it.
func (s *hostSetup) claimInto(t *testing.T) string {
	t.Helper()
	return claimHost(t, s.cloud.url, s.code)
}

// startHostIn runs `host run` with args in directory dir (its working
// directory), on state, logging to a file of its own; it returns once the
// local API listens. The process is killed when the test ends.
func startHostIn(t *testing.T, dir, state string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: "host", logPath: filepath.Join(t.TempDir(), "host.log"), done: make(chan struct{})}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(binDir, "host"), append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RELAY_HOST_STATE="+state, "RELAY_HOST_LISTEN=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	p.cmd = cmd
	go func() {
		p.exitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- host log (tail) ---\n%s", tail(p.logPath, 60))
		}
	})
	p.listening("local API listening")
	return p
}

// TestHostExecBesideRelativeConfig: a host started in its configuration's
// directory with --config given relative to it runs an exec program named
// "./script.sh" beside the file (it used to look "script.sh" up in $PATH,
// and every run failed).
func TestHostExecBesideRelativeConfig(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "exec-path")
	state := s.claimInto(t)
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.sh"),
		[]byte("#!/bin/sh\necho \"$RELAY_DELIVERY_ID\" >> \"$(dirname \"$0\")/ran\"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "relay-host.json"), []byte(`{"cloud_url": "`+s.cloud.url+`", "heartbeat_interval_s": 1,
		"webhooks": {"github": {"enabled": true, "exec": ["./script.sh"]}}}`), 0o600))

	check := exec.Command(filepath.Join(binDir, "host"), "run", "--check", "--offline", "--config", "relay-host.json")
	check.Dir = dir
	check.Env = append(os.Environ(), "RELAY_HOST_STATE="+state)
	out, err := check.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "* → exec "+filepath.Join(dir, "script.sh")+" (timeout 10m0s)")

	h := startHostIn(t, dir, state, "--config", "relay-host.json")
	push := hostPayload(t, "github/push.json")
	id := sendGitHub(t, s.cloud.url, s.hostID, "push", "exec-path-1", push)
	eventually(t, 30*time.Second, "the script beside the configuration ran", func() bool {
		h.mustBeRunning()
		b, _ := os.ReadFile(ran)
		return string(b) == id+"\n"
	})
	eventually(t, 30*time.Second, "the delivery acked", func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })
}
