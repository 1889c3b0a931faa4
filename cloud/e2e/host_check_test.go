package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostRunCheckAsksTheCloud runs `host run --check` against a real cloud:
// it exchanges the claimed credential for a token and exits as `host run`
// would — 0 accepted, 3 refused (a wrong credential, a deactivated host), 1
// when the cloud cannot be reached — while --offline checks the files alone.
func TestHostRunCheckAsksTheCloud(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "check")
	state := t.TempDir()
	claimed, err := exec.Command(filepath.Join(binDir, "host"), "claim", "--cloud", s.cloud.url, "--code", s.code, "--state", state).CombinedOutput()
	require.NoError(t, err, string(claimed))
	credsPath := filepath.Join(state, "credentials.json")

	check := func(cloudURL string, extra ...string) (int, string) {
		t.Helper()
		cfg := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+cloudURL+`", "webhooks": {}}`), 0o600))
		cmd := exec.Command(filepath.Join(binDir, "host"), append([]string{"run", "--check", "--config", cfg}, extra...)...)
		cmd.Env = append(os.Environ(), "RELAY_HOST_STATE="+state)
		return runExit(t, cmd)
	}

	code, out := check(s.cloud.url)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "configuration OK")
	require.Contains(t, out, "credential accepted by the cloud")

	// Another cloud than the claimed one takes --other-cloud.
	unreachable := "http://" + deadAddr
	code, out = check(unreachable)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "config cloud_url "+unreachable+" is not the cloud this host was claimed from")
	code, out = check(unreachable, "--other-cloud")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "the cloud at "+unreachable+" cannot be reached")
	code, out = check(unreachable, "--offline", "--other-cloud")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "credential not checked with the cloud (--offline)")

	// A credential that is not the one the cloud issued.
	good, err := os.ReadFile(credsPath)
	require.NoError(t, err)
	var creds map[string]string
	require.NoError(t, json.Unmarshal(good, &creds))
	creds["host_credential"] = "made-up-credential"
	wrong, err := json.Marshal(creds)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(credsPath, wrong, 0o600))
	code, out = check(s.cloud.url)
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "does not accept host "+s.hostID+"'s credential (401: unknown host or wrong credential)")
	require.NotContains(t, out, "made-up-credential")
	require.NoError(t, os.WriteFile(credsPath, good, 0o600))

	require.Equal(t, 200, s.cloud.admin("POST", "/api/hosts/"+s.hostID+"/deactivate", nil, nil))
	code, out = check(s.cloud.url)
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "refuses host "+s.hostID+"'s credential (410: host is deactivated); claim the host again")
}
