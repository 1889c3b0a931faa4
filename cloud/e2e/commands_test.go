package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runCloud runs the cloud binary to completion and returns its exit code and
// output.
func runCloud(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cloud"), args...)
	cmd.Env = append(os.Environ(), env...)
	return runExit(t, cmd)
}

func TestCloudMigrateIsIdempotent(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			db := newDB(t)
			code, out := runCloud(t, []string{"RELAY_DATABASE_URL=" + db}, "migrate")
			require.Equal(t, 0, code, out)
			var applied, version int
			if name == "sqlite" { // a new file; Postgres's test databases are clones of a migrated one
				_, err := fmt.Sscanf(out, "%d migrations applied (now at version %d)\n", &applied, &version)
				require.NoError(t, err, out)
				require.Positive(t, applied)
				require.Equal(t, fmt.Sprintf("%d migrations applied (now at version %d)\n", applied, version), out)
			} else {
				_, err := fmt.Sscanf(out, "schema current at version %d\n", &version)
				require.NoError(t, err, out)
			}
			require.Positive(t, version)
			for i := 0; i < 2; i++ {
				code, out := runCloud(t, []string{"RELAY_DATABASE_URL=" + db}, "migrate")
				require.Equal(t, 0, code, out)
				require.Equal(t, fmt.Sprintf("schema current at version %d\n", version), out)
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
		"bad database":    {[]string{"RELAY_DATABASE_URL=mysql://u:pw@x/db"}, []string{"migrate"}, `RELAY_DATABASE_URL="mysql://…@x/db": want postgres://… or sqlite:PATH`},
		"short jwt key":   {[]string{"RELAY_JWT_KEY=short", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_JWT_KEY: want at least 32 bytes"},
		"bad secret keys": {[]string{"RELAY_SECRET_KEYS=abc", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_SECRET_KEYS"},
		"bad log level":   {nil, []string{"serve", "--log-level", "loud"}, `-log-level="loud": want debug, info, warn or error`},
		"bad listen":      {[]string{"RELAY_LISTEN=bogus"}, []string{"serve"}, `RELAY_LISTEN="bogus": want host:port`},
		"no url scheme":   {[]string{"RELAY_PUBLIC_URL=relay.example.com"}, []string{"serve"}, `RELAY_PUBLIC_URL="relay.example.com": want an absolute http:// or https:// URL`},
		"short admin":     {[]string{"RELAY_ADMIN_TOKEN=five!"}, []string{"serve"}, "RELAY_ADMIN_TOKEN: want at least 32 characters"},
		"bad duration":    {[]string{"RELAY_RETAIN_ACKED=7d"}, []string{"serve"}, `RELAY_RETAIN_ACKED="7d": want a duration`},
		"bad number":      {[]string{"RELAY_RATE_LIMIT_PER_MIN=lots"}, []string{"serve"}, `RELAY_RATE_LIMIT_PER_MIN="lots"`},
		"host share":      {[]string{"RELAY_QUARANTINE_MAX=100", "RELAY_QUARANTINE_HOST_MAX=101"}, []string{"serve"}, "RELAY_QUARANTINE_HOST_MAX=101"},
		"host share MiB":  {[]string{"RELAY_QUARANTINE_HOST_MAX_MB=2048"}, []string{"serve"}, "RELAY_QUARANTINE_HOST_MAX_MB=2048"},
		"bad rate":        {[]string{"RELAY_QUARANTINE_PER_MIN=-1"}, []string{"serve"}, `RELAY_QUARANTINE_PER_MIN="-1"`},
		"bad proxies":     {[]string{"RELAY_TRUSTED_PROXIES=10.0.0.0/33", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, "RELAY_TRUSTED_PROXIES"},
		"empty budget":    {[]string{"RELAY_INTAKE_INFLIGHT_IP_MB=0", "RELAY_DATA_DIR=" + t.TempDir()}, []string{"serve"}, `RELAY_INTAKE_INFLIGHT_IP_MB="0": want a whole number of MiB`},
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

// TestCloudWarnsWithoutPublicURL: listening beyond loopback without
// RELAY_PUBLIC_URL, serve warns at start; on loopback, or with the URL
// set, it does not.
func TestCloudWarnsWithoutPublicURL(t *testing.T) {
	const warning = "RELAY_PUBLIC_URL is not set"
	for name, c := range map[string]struct {
		env  []string
		warn bool
	}{
		"all interfaces":      {[]string{"RELAY_LISTEN=0.0.0.0:0"}, true},
		"all interfaces, set": {[]string{"RELAY_LISTEN=0.0.0.0:0", "RELAY_PUBLIC_URL=https://relay.example.com"}, false},
		"loopback":            {[]string{"RELAY_LISTEN=127.0.0.1:0"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			p := startProc(t, "cloud", append([]string{
				"RELAY_DATABASE_URL=sqlite:" + filepath.Join(t.TempDir(), "cloud.db"),
				"RELAY_DATA_DIR=" + t.TempDir(),
			}, c.env...), "serve")
			eventually(t, 30*time.Second, "cloud listening", func() bool {
				return strings.Contains(tail(p.logPath, 1000), "cloud listening")
			})
			require.Equal(t, c.warn, strings.Contains(tail(p.logPath, 1000), warning), tail(p.logPath, 1000))
		})
	}
}
