package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostWarnsOfASourceTypo: a host whose configuration names "githb"
// while the cloud's source is "github" is warned — by `host run --check`
// (exit 0, the nearest name given) and in `host run`'s log at start — that
// the handler never runs and which name was meant.
func TestHostWarnsOfASourceTypo(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "typo")
	state := s.claimInto(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "relay-host.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+s.cloud.url+`", "heartbeat_interval_s": 1,
		"webhooks": {"githb": {"enabled": true, "forward": "http://127.0.0.1:9/hook"}}}`), 0o600))

	check := exec.Command(filepath.Join(binDir, "host"), "run", "--check", "--config", cfg)
	check.Env = append(os.Environ(), "RELAY_HOST_STATE="+state)
	var stdout, stderr strings.Builder
	check.Stdout, check.Stderr = &stdout, &stderr
	err := check.Run()
	var ee *exec.ExitError
	require.False(t, errors.As(err, &ee), "a warning, not a failure: %v\n%s%s", err, stdout.String(), stderr.String())
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "credential accepted by the cloud")
	require.Contains(t, stdout.String(), "sources: 2 differ from the cloud's")
	require.Contains(t, stderr.String(), `host run --check: warning: webhooks.githb: the cloud has no source "githb" for this host, so this handler never runs; did you mean "github"?`)
	require.Contains(t, stderr.String(), `host run --check: warning: the cloud's source "github" is enabled, and the host's configuration has no webhooks.github`)

	h := startHostIn(t, dir, state, "--config", cfg)
	eventually(t, 30*time.Second, "the warning in host run's log", func() bool {
		h.mustBeRunning()
		b, _ := os.ReadFile(h.logPath)
		return strings.Contains(string(b), `level=WARN msg="source differs from the cloud's" kind=not-in-cloud source=githb detail=`) &&
			strings.Contains(string(b), `nearest=github`)
	})
}
