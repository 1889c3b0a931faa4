package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDesignExample(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`{"cloud_url": "https://relay.example.com/",
 "heartbeat_interval_s": 30,
 "webhooks": {
   "github": {"enabled": true, "events": ["pull_request", "push", "check_suite"],
              "forward": "http://127.0.0.1:3000/github"},
   "stripe": {"enabled": true, "exec": ["./scripts/on-stripe.sh"]},
   "slack":  {"enabled": false}}}`), "/etc/relay")
	require.NoError(t, err)
	require.Equal(t, "https://relay.example.com", c.CloudURL)
	require.Equal(t, 30*time.Second, c.HeartbeatInterval)
	require.Equal(t, DefaultWorkers, c.Workers)
	gh := c.Webhooks["github"]
	require.Equal(t, "forward", gh.HandlerKind())
	require.True(t, gh.Retry4xx)
	require.Equal(t, DefaultConnectTimeout, gh.ConnectTimeout)
	require.Equal(t, DefaultForwardTimeout, gh.Timeout)
	require.Equal(t, []string{"/etc/relay/scripts/on-stripe.sh"}, c.Webhooks["stripe"].Exec)
	require.Equal(t, DefaultExecTimeout, c.Webhooks["stripe"].Timeout)
	require.False(t, c.Webhooks["slack"].Enabled)

	sub := c.Subscription()
	require.Len(t, sub.Webhooks, 3)
	require.Equal(t, []string{"pull_request", "push", "check_suite"}, sub.Webhooks["github"].Events)
	require.False(t, sub.Webhooks["slack"].Enabled)
}

func TestParseOptionalKeys(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`{"workers": 2, "webhooks": {"billing": {"enabled": true,
		"forward": "http://localhost:9/x", "retry_4xx": false, "connect_timeout_s": 0.5, "timeout_s": 2}}}`), ".")
	require.NoError(t, err)
	require.Equal(t, "", c.CloudURL)
	require.Equal(t, DefaultHeartbeatInterval, c.HeartbeatInterval)
	require.Equal(t, 2, c.Workers)
	b := c.Webhooks["billing"]
	require.False(t, b.Retry4xx)
	require.Equal(t, 500*time.Millisecond, b.ConnectTimeout)
	require.Equal(t, 2*time.Second, b.Timeout)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, json, want string }{
		{"unknown top-level key", `{"cloud": "https://x"}`, `unknown field "cloud"`},
		{"unknown source key", `{"webhooks": {"gh": {"enabled": true, "forward": "http://x", "fwd": 1}}}`, `unknown field "fwd"`},
		{"trailing data", `{} {}`, "after the top-level object"},
		{"not json", `cloud_url = 1`, "invalid JSON"},
		{"bad cloud url scheme", `{"cloud_url": "ftp://relay"}`, "cloud_url: invalid URL"},
		{"cloud url without host", `{"cloud_url": "https://"}`, "no host"},
		{"relative cloud url", `{"cloud_url": "relay.example.com"}`, "scheme must be http or https"},
		{"zero interval", `{"heartbeat_interval_s": 0}`, "heartbeat_interval_s"},
		{"negative interval", `{"heartbeat_interval_s": -5}`, "heartbeat_interval_s"},
		{"zero workers", `{"workers": 0}`, "workers"},
		{"enabled without handler", `{"webhooks": {"github": {"enabled": true}}}`, "webhooks.github: enabled but has no handler"},
		{"both handlers", `{"webhooks": {"github": {"enabled": true, "forward": "http://x", "exec": ["a"]}}}`, "only one of"},
		{"bad forward url", `{"webhooks": {"github": {"enabled": true, "forward": "127.0.0.1:3000/github"}}}`, "forward: invalid URL"},
		{"empty exec", `{"webhooks": {"github": {"enabled": true, "exec": []}}}`, "exec: needs a program"},
		{"empty event", `{"webhooks": {"github": {"enabled": true, "forward": "http://x", "events": [""]}}}`, "empty event type"},
		{"bad timeout", `{"webhooks": {"github": {"enabled": true, "forward": "http://x", "timeout_s": 0}}}`, "timeout_s"},
		{"bad source name", `{"webhooks": {"git hub": {"enabled": false}}}`, "invalid source name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json), ".")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.json"))
	require.ErrorContains(t, err, "read config")
}

func TestCredentialsRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")

	_, err := ReadCredentials(dir)
	require.ErrorIs(t, err, ErrNoCredentials)

	want := Credentials{CloudURL: "https://relay.example.com", HostID: "h_1", HostCredential: "secret"}
	require.NoError(t, WriteCredentials(dir, want))
	require.NoError(t, WriteCredentials(dir, want)) // overwrite is fine

	got, err := ReadCredentials(dir)
	require.NoError(t, err)
	require.Equal(t, want, got)

	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(dir, CredentialsFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left behind")
}

func TestResolve(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvState: "/env/state", EnvListen: "127.0.0.1:9"}
	getenv := func(k string) string { return env[k] }
	none := func(string) string { return "" }

	d, err := StateDir("/flag", getenv)
	require.NoError(t, err)
	require.Equal(t, "/flag", d)
	d, err = StateDir("", getenv)
	require.NoError(t, err)
	require.Equal(t, "/env/state", d)
	d, err = StateDir("", none)
	require.NoError(t, err)
	require.Equal(t, ".relay-host", filepath.Base(d))

	require.Equal(t, "0.0.0.0:1", ListenAddr("0.0.0.0:1", getenv))
	require.Equal(t, "127.0.0.1:9", ListenAddr("", getenv))
	require.Equal(t, DefaultListen, ListenAddr("", none))
}
