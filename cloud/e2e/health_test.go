package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestHostHealthCommand: `host health`, the host image's health check,
// exits 0 while the running host heartbeats, and 1 once the cloud has been
// gone three intervals (its local API says degraded) or when no host
// answers.
func TestHostHealthCommand(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "health")
	rc := startReceiver(t)
	h := claimAndStartHost(t, s.cloud.url, s.code, rc.url)
	health := func(listen string) (int, string) {
		return runExit(t, exec.Command(filepath.Join(binDir, "host"), "health", "--listen", listen))
	}
	eventually(t, 30*time.Second, "host health says ok", func() bool { code, _ := health(h.listen); return code == 0 })
	s.cloud.kill()
	eventually(t, 30*time.Second, "host health fails with the cloud gone", func() bool {
		code, out := health(h.listen)
		return code == 1 && len(out) > 0
	})
	if code, out := health(deadAddr); code != 1 {
		t.Fatalf("no host listening: exit %d, %s", code, out)
	}
}
