package config

import (
	"os"
	"path/filepath"
	"strings"
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
	require.Equal(t, DefaultMaxBackoff, c.MaxBackoff)
	require.Equal(t, "auto", c.Transport, "the socket, heartbeats while it cannot connect")
	require.False(t, c.Compress, "uncompressed unless asked")
	require.Equal(t, DefaultShutdownGrace, c.ShutdownGrace)
	require.Equal(t, 30*24*time.Hour, c.LedgerRetention)
	gh := c.Webhooks["github"]
	require.False(t, gh.Parallel)
	require.Equal(t, []Route{{Handler: Handler{Forward: "http://127.0.0.1:3000/github", Retry4xx: true,
		RetryNonzeroExit: true, ConnectTimeout: DefaultConnectTimeout, Timeout: DefaultForwardTimeout}}}, gh.Routes)
	require.Equal(t, "forward", gh.Routes[0].Handler.Kind())
	st := c.Webhooks["stripe"].Routes[0].Handler
	require.Equal(t, "exec", st.Kind())
	require.Equal(t, []string{"/etc/relay/scripts/on-stripe.sh"}, st.Exec)
	require.Equal(t, DefaultExecTimeout, st.Timeout)
	require.False(t, c.Webhooks["slack"].Enabled)
	require.Empty(t, c.Webhooks["slack"].Routes)

	sub := c.Subscription()
	require.Len(t, sub.Webhooks, 3)
	require.Equal(t, []string{"pull_request", "push", "check_suite"}, sub.Webhooks["github"].Events)
	require.Nil(t, sub.Webhooks["stripe"].Events)
	require.False(t, sub.Webhooks["slack"].Enabled)
}

func TestParseOptionalKeys(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`{"workers": 2, "max_backoff_s": 5, "shutdown_grace_s": 120, "ledger_retention_days": 7,
		"webhooks": {"billing": {"enabled": true, "parallel": true, "provider": "stripe",
		"forward": "http://localhost:9/x", "retry_4xx": false, "connect_timeout_s": 0.5, "timeout_s": 2}}}`), ".")
	require.NoError(t, err)
	require.Equal(t, "", c.CloudURL)
	require.Equal(t, DefaultHeartbeatInterval, c.HeartbeatInterval)
	require.Equal(t, 2, c.Workers)
	require.Equal(t, 5*time.Second, c.MaxBackoff)
	require.Equal(t, 2*time.Minute, c.ShutdownGrace)
	require.Equal(t, 7*24*time.Hour, c.LedgerRetention)
	b := c.Webhooks["billing"]
	require.True(t, b.Parallel)
	require.Equal(t, "stripe", b.Provider)
	h := b.Routes[0].Handler
	require.False(t, h.Retry4xx)
	require.Equal(t, 500*time.Millisecond, h.ConnectTimeout)
	require.Equal(t, 2*time.Second, h.Timeout)
}

// TestParseRoutes: routes in order, then the source's own handler as the
// catch-all; route options default to the source's, then to the kind's.
func TestParseRoutes(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`{"webhooks": {
		"slack": {"enabled": true, "timeout_s": 60, "retry_nonzero_exit": false,
			"routes": [
				{"events": ["app_mention", "message"], "exec": ["bin/agent", "--reply"], "timeout_s": 900},
				{"events": ["reaction_added"], "forward": "http://127.0.0.1:3000/reactions", "retry_4xx": false}],
			"exec": ["/usr/bin/logger"]},
		"github": {"enabled": true, "events": ["pull_request", "check_suite.completed"], "routes": [
				{"events": ["pull_request.opened", "check_suite.completed"], "exec": ["./review.sh"], "retry_nonzero_exit": true}]}}}`), "/cfg")
	require.NoError(t, err)
	sl := c.Webhooks["slack"]
	require.Len(t, sl.Routes, 3)
	require.Equal(t, Route{Events: []string{"app_mention", "message"}, Handler: Handler{
		Exec: []string{"/cfg/bin/agent", "--reply"}, Retry4xx: true, RetryNonzeroExit: false,
		ConnectTimeout: DefaultConnectTimeout, Timeout: 900 * time.Second}}, sl.Routes[0])
	require.Equal(t, Route{Events: []string{"reaction_added"}, Handler: Handler{
		Forward: "http://127.0.0.1:3000/reactions", Retry4xx: false, RetryNonzeroExit: false,
		ConnectTimeout: DefaultConnectTimeout, Timeout: 60 * time.Second}}, sl.Routes[1])
	require.Equal(t, Route{Handler: Handler{Exec: []string{"/usr/bin/logger"}, Retry4xx: true,
		RetryNonzeroExit: false, ConnectTimeout: DefaultConnectTimeout, Timeout: 60 * time.Second}}, sl.Routes[2])
	gh := c.Webhooks["github"]
	require.Len(t, gh.Routes, 1)
	require.True(t, gh.Routes[0].Handler.RetryNonzeroExit)

	sub := c.Subscription()
	require.Nil(t, sub.Webhooks["slack"].Events, "a catch-all handler wants every event")
	require.Equal(t, []string{"pull_request", "check_suite.completed"}, sub.Webhooks["github"].Events)

	// Without the source's own events or a catch-all, the cloud is asked for
	// what the routes take.
	c, err = Parse([]byte(`{"webhooks": {"slack": {"enabled": true, "routes": [
		{"events": ["app_mention"], "exec": ["a"]}, {"events": ["message", "app_mention"], "exec": ["b"]}]},
		"any": {"enabled": true, "routes": [{"events": ["x"], "exec": ["a"]}, {"events": ["*"], "exec": ["b"]}]}}}`), ".")
	require.NoError(t, err)
	require.Equal(t, []string{"app_mention", "message"}, c.Subscription().Webhooks["slack"].Events)
	require.Nil(t, c.Subscription().Webhooks["any"].Events)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	src := func(body string) string { return `{"webhooks": {"github": ` + body + `}}` }
	for _, tc := range []struct{ name, json, want string }{
		{"unknown top-level key", `{"cloud": "https://x"}`, `unknown top-level key "cloud" (known keys: cloud_url, compress, heartbeat_interval_s, ledger_retention_days, max_backoff_s, shutdown_grace_s, transport, webhooks, workers)`},
		{"unknown source key", src(`{"enabled": true, "forward": "http://x", "fwd": 1}`), `webhooks.github: unknown key "fwd"`},
		{"unknown route key", src(`{"enabled": true, "routes": [{"events": ["push"], "exec": ["a"], "parallel": true}]}`), `webhooks.github.routes[0]: unknown key "parallel"`},
		{"wrong type", src(`{"enabled": "yes"}`), `webhooks.github.enabled: want true or false, got "yes"`},
		{"wrong list item", src(`{"enabled": true, "exec": ["a", 1]}`), `webhooks.github.exec[1]: want a string, got 1`},
		{"fractional int", `{"workers": 1.5}`, `workers: want a whole number, got 1.5`},
		{"null source", `{"webhooks": {"github": null}}`, `webhooks.github: want an object, got null`},
		{"not an object", `[]`, `the configuration: want an object, got a list`},
		{"trailing data", `{} {}`, "after the top-level object"},
		{"not json", `cloud_url = 1`, "invalid JSON"},
		{"bad cloud url scheme", `{"cloud_url": "ftp://relay"}`, "cloud_url: invalid URL"},
		{"cloud url without host", `{"cloud_url": "https://"}`, "no host"},
		{"relative cloud url", `{"cloud_url": "relay.example.com"}`, "scheme must be http or https"},
		{"zero interval", `{"heartbeat_interval_s": 0}`, "heartbeat_interval_s"},
		{"negative interval", `{"heartbeat_interval_s": -5}`, "heartbeat_interval_s"},
		{"zero workers", `{"workers": 0}`, "workers"},
		{"bad backoff", `{"max_backoff_s": 0}`, "max_backoff_s: must be more than 0"},
		{"bad retention", `{"ledger_retention_days": 0}`, "ledger_retention_days: must be between 1 and 3650"},
		{"enabled without handler", src(`{"enabled": true}`), "webhooks.github: enabled but has no handler: set forward, exec or routes"},
		{"both handlers", src(`{"enabled": true, "forward": "http://x", "exec": ["a"]}`), "webhooks.github: set only one of forward and exec"},
		{"bad forward url", src(`{"enabled": true, "forward": "127.0.0.1:3000/github"}`), "webhooks.github.forward: invalid URL"},
		{"empty exec", src(`{"enabled": true, "exec": []}`), "webhooks.github.exec: needs a program"},
		{"empty event", src(`{"enabled": true, "forward": "http://x", "events": ["push", ""]}`), "webhooks.github.events[1]: empty event name"},
		{"event with space", src(`{"enabled": true, "forward": "http://x", "events": ["pull request"]}`), `webhooks.github.events[0]: invalid event name "pull request"`},
		{"partial wildcard", src(`{"enabled": true, "forward": "http://x", "events": ["pull_request.*"]}`), `the only wildcard is "*" on its own`},
		{"double dot", src(`{"enabled": true, "forward": "http://x", "events": ["a..b"]}`), `invalid event name "a..b"`},
		{"bad timeout", src(`{"enabled": true, "forward": "http://x", "timeout_s": 0}`), "webhooks.github.timeout_s"},
		{"bad source name", `{"webhooks": {"git hub": {"enabled": false}}}`, "invalid source name"},
		// Names the cloud's URLs never take: their handlers could never run.
		{"source name in capitals", `{"webhooks": {"GitHub": {"enabled": false}}}`, `invalid source name "GitHub": a source's name is the cloud's, 1 to 64 of a-z`},
		{"source name with a dot", `{"webhooks": {"hooks.prod": {"enabled": false}}}`, `invalid source name "hooks.prod"`},
		{"source name of 65", `{"webhooks": {"` + strings.Repeat("a", 65) + `": {"enabled": false}}}`, "invalid source name"},
		{"unknown provider", src(`{"enabled": true, "forward": "http://x", "provider": "gitlab"}`), `webhooks.github.provider: unknown payload parser "gitlab"`},
		{"route without events", src(`{"enabled": true, "routes": [{"exec": ["a"]}]}`), `webhooks.github.routes[0].events: a route needs its events`},
		{"route without handler", src(`{"enabled": true, "routes": [{"events": ["push"]}]}`), `webhooks.github.routes[0]: a route needs a handler`},
		{"route with both", src(`{"enabled": true, "routes": [{"events": ["push"], "exec": ["a"], "forward": "http://x"}]}`), `webhooks.github.routes[0]: set only one of forward and exec`},
		{"route bad event", src(`{"enabled": true, "routes": [{"events": ["push", "a b"], "exec": ["a"]}]}`), `webhooks.github.routes[0].events[1]: invalid event name`},
		{"route bad url", src(`{"enabled": true, "routes": [{"events": ["push"], "forward": "nope"}]}`), `webhooks.github.routes[0].forward: invalid URL`},
		{"route event never arrives", src(`{"enabled": true, "events": ["push"], "routes": [{"events": ["issues"], "exec": ["a"]}]}`), `webhooks.github.routes[0].events[0]: "issues" is not in the source's events`},
		{"route option of other kind", src(`{"enabled": true, "routes": [{"events": ["push"], "exec": ["a"], "retry_4xx": false}]}`), `webhooks.github.routes[0].retry_4xx: applies to forward handlers, not exec`},
		{"source option applies to nothing", src(`{"enabled": true, "retry_nonzero_exit": false, "forward": "http://x"}`), `webhooks.github.retry_nonzero_exit: applies to exec handlers, and this source has none`},
		{"connect timeout on exec", src(`{"enabled": true, "exec": ["a"], "connect_timeout_s": 1}`), `webhooks.github.connect_timeout_s: applies to forward handlers`},
		{"unknown transport", `{"transport": "grpc"}`, `transport: must be auto, websocket or heartbeat, got "grpc"`},
		{"transport not a string", `{"transport": 1}`, `transport`},
		{"compress not a bool", `{"compress": "yes"}`, `compress: want true or false, got "yes"`},
		{"compress as a number", `{"compress": 1}`, `compress: want true or false, got 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json), ".")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseCompress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		want bool
	}{
		{`{}`, false},
		{`{"compress": null}`, false},
		{`{"compress": false}`, false},
		{`{"compress": true}`, true},
		{`{"compress": true, "transport": "heartbeat"}`, true},
	} {
		c, err := Parse([]byte(tc.json), ".")
		require.NoError(t, err, tc.json)
		require.Equal(t, tc.want, c.Compress, tc.json)
	}
}

func TestParseAcceptsEventForms(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{"webhooks": {"x": {"enabled": true, "exec": ["a"], "events":
		["*", "push", "pull_request.opened", "invoice.payment_failed", "customer.subscription.updated", "Push_Hook", "team:join", "a/b-c"]}}}`), ".")
	require.NoError(t, err)
	// A route event may name an action of a type the source wants, and a
	// source event may name an action of a route's type.
	_, err = Parse([]byte(`{"webhooks": {"x": {"enabled": true, "events": ["pull_request", "check_suite.completed"], "routes": [
		{"events": ["pull_request.opened"], "exec": ["a"]}, {"events": ["check_suite"], "exec": ["b"]}]}}}`), ".")
	require.NoError(t, err)
	// A disabled source may keep its handler; nulls mean absent.
	c, err := Parse([]byte(`{"workers": null, "webhooks": {"x": {"enabled": false, "forward": "http://x", "events": null}}}`), ".")
	require.NoError(t, err)
	require.Equal(t, DefaultWorkers, c.Workers)
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

// programTree lays out a configuration directory: conf/ with x.sh and
// sub/y.sh beside the configuration file, z.sh one level up, and a
// file that is not executable; it returns the top directory.
func programTree(t *testing.T) string {
	t.Helper()
	top := t.TempDir()
	for _, p := range []string{"conf/x.sh", "conf/sub/y.sh", "z.sh"} {
		require.NoError(t, os.MkdirAll(filepath.Join(top, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(top, p), []byte("#!/bin/sh\n"), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(top, "conf/plain.sh"), []byte("#!/bin/sh\n"), 0o644))
	return top
}

func execConfig(program string) string {
	return `{"webhooks": {"deploy": {"enabled": true, "exec": ["` + program + `", "--flag"]}}}`
}

// TestLoadResolvesPrograms: a relative exec program (with a "/") runs
// from the configuration file's directory, made absolute, whichever
// directory the host was started in and however the file was named; an
// absolute one as it is; a bare name is left to $PATH.
func TestLoadResolvesPrograms(t *testing.T) {
	// Not parallel: it changes the working directory.
	top := programTree(t)
	conf := filepath.Join(top, "conf")
	for _, tc := range []struct {
		name    string
		program string
		wd      string // the directory the host starts in
		path    string // the configuration file as given
		want    string
	}{
		{"dot slash, config relative from its own directory", "./x.sh", conf, "host.json", filepath.Join(conf, "x.sh")},
		{"dot slash, config relative from above", "./x.sh", top, "conf/host.json", filepath.Join(conf, "x.sh")},
		{"dot slash, config absolute", "./x.sh", t.TempDir(), filepath.Join(conf, "host.json"), filepath.Join(conf, "x.sh")},
		{"subdirectory, config relative", "sub/y.sh", conf, "host.json", filepath.Join(conf, "sub", "y.sh")},
		{"subdirectory, config absolute", "sub/y.sh", top, filepath.Join(conf, "host.json"), filepath.Join(conf, "sub", "y.sh")},
		{"parent, config relative", "../z.sh", conf, "./host.json", filepath.Join(top, "z.sh")},
		{"parent, config absolute", "../z.sh", top, filepath.Join(conf, "host.json"), filepath.Join(top, "z.sh")},
		{"absolute", filepath.Join(top, "z.sh"), conf, "host.json", filepath.Join(top, "z.sh")},
		{"bare name, in $PATH", "sh", conf, "host.json", "sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeConfig(t, filepath.Join(conf, "host.json"), execConfig(tc.program))
			t.Chdir(tc.wd)
			c, err := Load(tc.path)
			require.NoError(t, err)
			require.Equal(t, []string{tc.want, "--flag"}, c.Webhooks["deploy"].Routes[0].Handler.Exec)
		})
	}
}

// TestLoadRefusesProgramsThatCannotRun: an enabled source's exec program
// must exist and be executable; the error names the key, the program as
// written and where it was looked for. A disabled source's is not looked at.
func TestLoadRefusesProgramsThatCannotRun(t *testing.T) {
	// Not parallel: it changes the working directory.
	top := programTree(t)
	conf := filepath.Join(top, "conf")
	t.Chdir(conf)
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"missing, dot slash", execConfig("./nope.sh"),
			[]string{`config host.json: webhooks.deploy.exec: "./nope.sh" (` + filepath.Join(conf, "nope.sh") + `): no such file`}},
		{"missing, parent", execConfig("../nope.sh"),
			[]string{`webhooks.deploy.exec: "../nope.sh" (` + filepath.Join(top, "nope.sh") + `): no such file`}},
		{"missing, absolute", execConfig("/nonexistent/relay/x.sh"),
			[]string{`webhooks.deploy.exec: "/nonexistent/relay/x.sh": no such file`}},
		{"not executable", execConfig("./plain.sh"),
			[]string{`webhooks.deploy.exec: "./plain.sh" (` + filepath.Join(conf, "plain.sh") + `): is not executable`}},
		{"a directory", execConfig("./sub"),
			[]string{`webhooks.deploy.exec: "./sub" (` + filepath.Join(conf, "sub") + `): is a directory`}},
		{"bare name beside the file, not in $PATH", execConfig("x.sh"),
			[]string{`webhooks.deploy.exec: "x.sh": not found in $PATH`, `write "./x.sh" for one beside the configuration file`}},
		{"in a route", `{"webhooks": {"slack": {"enabled": true, "routes": [{"events": ["message"], "exec": ["./x.sh"]},
			{"events": ["app_mention"], "exec": ["./gone.sh"]}]}}}`,
			[]string{`webhooks.slack.routes[1].exec: "./gone.sh" (` + filepath.Join(conf, "gone.sh") + `): no such file`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeConfig(t, filepath.Join(conf, "host.json"), tc.config)
			_, err := Load("host.json")
			require.Error(t, err)
			for _, want := range tc.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
	writeConfig(t, filepath.Join(conf, "host.json"), `{"webhooks": {"deploy": {"enabled": false, "exec": ["./nope.sh"]}}}`)
	_, err := Load("host.json")
	require.NoError(t, err, "a disabled source's handler never runs")
}

// TestLoadSyntaxErrorsHaveLineAndColumn: JSON that does not parse is
// reported as path:line:column, the column counted in characters.
func TestLoadSyntaxErrorsHaveLineAndColumn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ name, json, want string }{
		{"missing comma", "{\"workers\": 2\n \"webhooks\": {}}", ":2:2: invalid JSON: invalid character '\"' after object key:value pair"},
		{"trailing comma", "{\"webhooks\": {\n  \"github\": {\"enabled\": false},\n}}", ":3:1: invalid JSON: invalid character '}' looking for beginning of object key string"},
		{"after a multi-byte character", "{\"webhooks\": {\"é\": {\"enabled\": tru}}}", ":1:35: invalid JSON: invalid character '}' in literal true"},
		{"cut short", "{\"webhooks\": {\n", ":2:1: invalid JSON: the file ends before the JSON does"},
		{"trailing data", "{}\n\n  {}", ":3:3: invalid JSON: unexpected data after the top-level object"},
		{"empty", "", "invalid JSON: the file is empty"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
		writeConfig(t, path, tc.json)
		_, err := Load(path)
		require.ErrorContains(t, err, tc.want, tc.name)
		if tc.name != "empty" {
			require.True(t, strings.HasPrefix(err.Error(), path+":"), "%s: %v", tc.name, err)
		}
	}
}

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}
