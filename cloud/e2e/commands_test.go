package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCloud runs the cloud binary to completion and returns its exit code and
// output.
func runCloud(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cloud"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err, string(out))
	return 0, string(out)
}

func TestCloudMigrateIsIdempotent(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			db := newDB(t)
			for i := 0; i < 2; i++ {
				code, out := runCloud(t, []string{"RELAY_DATABASE_URL=" + db}, "migrate")
				require.Equal(t, 0, code, out)
				require.Contains(t, out, "migrations applied")
			}
		})
	}
}

func TestCloudUsageErrors(t *testing.T) {
	cases := map[string]struct {
		env  []string
		args []string
		want string
	}{
		"no command":      {nil, nil, "usage: cloud"},
		"unknown command": {nil, []string{"launch"}, `unknown command "launch"`},
		"bad flag":        {nil, []string{"serve", "--no-such-flag"}, "no-such-flag"},
		"bad database":    {[]string{"RELAY_DATABASE_URL=mysql://u:pw@x/db"}, []string{"migrate"}, "must start with postgres:// or sqlite:"},
		"short jwt key":   {[]string{"RELAY_JWT_KEY=short", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_JWT_KEY must be at least 32 bytes"},
		"bad secret keys": {[]string{"RELAY_SECRET_KEYS=abc", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_SECRET_KEYS"},
		"bad log level":   {nil, []string{"serve", "--log-level", "loud"}, "log level"},
		"bad duration":    {[]string{"RELAY_RETAIN_ACKED=7d"}, []string{"serve"}, `RELAY_RETAIN_ACKED="7d": want a duration`},
		"bad number":      {[]string{"RELAY_RATE_LIMIT_PER_MIN=lots"}, []string{"serve"}, `RELAY_RATE_LIMIT_PER_MIN="lots"`},
		"bad proxies":     {[]string{"RELAY_TRUSTED_PROXIES=10.0.0.0/33", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_TRUSTED_PROXIES"},
		"empty budget":    {[]string{"RELAY_INTAKE_INFLIGHT_IP_MB=0", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_INTAKE_INFLIGHT_IP_MB=0"},
		"rekey bad keys":  {[]string{"RELAY_SECRET_KEYS=abc", "RELAY_DATABASE_URL=sqlite:" + t.TempDir() + "/c.db"}, []string{"rekey"}, "RELAY_SECRET_KEYS"},
	}
	for _, cmd := range []string{"serve", "migrate", "rekey"} {
		code, out := runCloud(t, nil, cmd, "-h")
		require.Equal(t, 0, code, "%s -h: %s", cmd, out)
		require.Contains(t, out, "-database-url", cmd)
	}
	for name, c := range cases {
		code, out := runCloud(t, c.env, c.args...)
		require.Equal(t, 2, code, "%s: %s", name, out)
		require.Contains(t, out, c.want, name)
		require.NotContains(t, out, "pw@", "%s: a database password is never printed", name)
	}
}
