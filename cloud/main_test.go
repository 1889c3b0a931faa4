package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

var envName = regexp.MustCompile(`\((RELAY_[A-Z0-9_]+)`)

// commandFlags are the settings of each command, as registered.
func commandFlags(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	out := map[string]*flag.FlagSet{}
	for _, cmd := range []string{"serve", "migrate", "rekey"} {
		var o options
		out[cmd] = o.flagSet(cmd)
	}
	return out
}

// settingEnv is the variable a flag's usage names.
func settingEnv(t *testing.T, f *flag.Flag) string {
	t.Helper()
	m := envName.FindStringSubmatch(f.Usage)
	require.NotNil(t, m, "-%s: its usage names no RELAY_ variable", f.Name)
	return m[1]
}

// hermetic clears every setting's variable for the test and sets the ones
// a command needs to stay in a temporary directory.
func hermetic(t *testing.T) string {
	t.Helper()
	for _, fs := range commandFlags(t) {
		fs.VisitAll(func(f *flag.Flag) {
			name := settingEnv(t, f)
			t.Setenv(name, "")
			os.Unsetenv(name)
		})
	}
	dir := t.TempDir()
	t.Setenv("RELAY_DATABASE_URL", "sqlite:"+filepath.Join(dir, "cloud.db"))
	t.Setenv("RELAY_DATA_DIR", dir)
	t.Setenv("RELAY_LISTEN", "127.0.0.1:0")
	return dir
}

func key32(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

// settingCase is a setting's bad values, and a good value other than its
// default.
type settingCase struct {
	bad    []string
	good   string
	with   map[string]string // the settings the good value goes with
	secret bool              // a bad value must never be printed
}

// settingCases are the settings that are not plain numbers or durations,
// and the numbers with ranges of their own; a number or duration setting
// without a case gets "many"/"-1" or "7d"/"-1s".
func settingCases(t *testing.T, dir string) map[string]settingCase {
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		panic(err)
	}
	badKeys := filepath.Join(dir, "bad-keys")
	if err := os.WriteFile(badKeys, []byte(key32(1)+"\nnot-a-key\n"), 0o600); err != nil {
		panic(err)
	}
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(strings.Repeat("f", 32)+"\n"), 0o600); err != nil {
		panic(err)
	}
	goodKeys := filepath.Join(dir, "keys")
	if err := os.WriteFile(goodKeys, []byte(key32(2)+"\n"+key32(1)+"\n"), 0o600); err != nil {
		panic(err)
	}
	leaf := tlstest.NewCA(t).Issue(t, "relay.example.com")
	certFile, keyFile := leaf.Write(t, dir)
	return map[string]settingCase{
		"RELAY_TLS_CERT":              {bad: []string{filepath.Join(dir, "missing.pem"), file, keyFile, dir}, good: certFile, with: map[string]string{"RELAY_TLS_KEY": keyFile}},
		"RELAY_TLS_KEY":               {bad: []string{filepath.Join(dir, "missing.pem"), file, certFile}, good: keyFile, with: map[string]string{"RELAY_TLS_CERT": certFile}},
		"RELAY_ACME_DOMAINS":          {bad: []string{"localhost", "10.0.0.1", "*.example.com", "relay.example.com,bad_name.com", " , "}, good: "relay.example.com, www.relay.example.com"},
		"RELAY_ACME_CACHE":            {bad: []string{file}, good: filepath.Join(dir, "acme")},
		"RELAY_ACME_EMAIL":            {bad: []string{"ops", "ops@", "a@b@c", "ops@example.com, dev@example.com"}, good: "ops@example.com"},
		"RELAY_ACME_DIRECTORY_URL":    {bad: []string{"http://acme.example.com/directory", "acme", ""}, good: "https://acme-staging-v02.api.letsencrypt.org/directory"},
		"RELAY_HTTP_REDIRECT_LISTEN":  {bad: []string{"80", "bogus"}, good: ":0", with: map[string]string{"RELAY_ACME_DOMAINS": "relay.example.com"}},
		"RELAY_LISTEN":                {bad: []string{"bogus", ":http", "127.0.0.1:70000", ""}, good: "localhost:0"},
		"RELAY_DATABASE_URL":          {bad: []string{"mysql://u:pw@x/db", "sqlite:", "sqlite::memory:", "sqlite:a.db?mode=ro", "relay.db"}, good: "sqlite:" + filepath.Join(dir, "other.db")},
		"RELAY_DATA_DIR":              {bad: []string{file}, good: filepath.Join(dir, "new-dir")},
		"RELAY_ADMIN_TOKEN":           {bad: []string{"five!", strings.Repeat("x", 31), strings.Repeat("x", 32) + " y"}, good: strings.Repeat("t", 32), secret: true},
		"RELAY_SECRET_KEYS":           {bad: []string{"abc", key32(1) + ",short"}, good: key32(1) + "," + key32(2), secret: true},
		"RELAY_SECRET_KEYS_FILE":      {bad: []string{filepath.Join(dir, "missing"), badKeys, dir}, good: goodKeys},
		"RELAY_ADMIN_TOKEN_FILE":      {bad: []string{filepath.Join(dir, "missing"), dir}, good: tokenFile},
		"RELAY_JWT_KEY_FILE":          {bad: []string{filepath.Join(dir, "missing"), dir}, good: tokenFile},
		"RELAY_JWT_KEY":               {bad: []string{"short"}, good: strings.Repeat("j", 32), secret: true},
		"RELAY_PUBLIC_URL":            {bad: []string{"relay.example.com", "ftp://relay.example.com", "https://", "https://relay.example.com/?a=b", "https://u:p@relay.example.com"}, good: "https://relay.example.com/base/"},
		"RELAY_LEASE":                 {bad: []string{"7d", "0s", "-1m"}, good: "90s"},
		"RELAY_HEARTBEAT_FLOOR":       {bad: []string{"soon", "0s"}, good: "5s"},
		"RELAY_LOG_LEVEL":             {bad: []string{"loud", ""}, good: "debug"},
		"RELAY_LOG_FORMAT":            {bad: []string{"xml", ""}, good: "json"},
		"RELAY_TRUSTED_PROXIES":       {bad: []string{"10.0.0.0/33", "proxy.local"}, good: "10.0.0.0/8, 192.168.1.7"},
		"RELAY_RATE_LIMIT_PER_MIN":    {bad: []string{"lots", "-1", "1000001"}, good: "600"},
		"RELAY_QUARANTINE_MAX_MB":     {bad: []string{"1GB", "-1", "1048577"}, good: "64"},
		"RELAY_AUTH_FAILURES_PER_MIN": {bad: []string{"ten", "0", "-1"}, good: "30"},
		"RELAY_ALERT_INTERVAL":        {bad: []string{"soon", "0s"}, good: "30s"},
		"RELAY_ALERT_RESEND":          {bad: []string{"often", "0s"}, good: "2h"},
		"RELAY_IPSET_URLS":            {bad: []string{"github", "slack=https://hooks.example/ips", "github=ftp://mirror.example/meta", "stripe=https://"}, good: "github=http://127.0.0.1:9/meta, stripe=https://mirror.example/ips.txt"},
		"RELAY_IPSET_REFRESH":         {bad: []string{"30s", "-1h", "daily"}, good: "24h"},
		"RELAY_ALERT_SINK_ALLOW":      {bad: []string{"10.0.0.0/33", "hooks.local", "127.0.0.1, ::1%eth0"}, good: "127.0.0.1, 10.20.0.0/16,fd00::/8"},
		"RELAY_HOST_LATE_AFTER":       {bad: []string{"late", "0s"}, good: "30s"},
		"RELAY_HOST_OFFLINE_AFTER":    {bad: []string{"gone", "30s", "1m"}, good: "10m"},
		"RELAY_SQLITE_CACHE_MB":       {bad: []string{"64MB", "0", "-1", "65537"}, good: "32"},
		"RELAY_GO_MEMORY_LIMIT_MB":    {bad: []string{"32MiB", "-1", "1048577"}, good: "0"},

		// in-flight budgets: at least a MiB
		"RELAY_INTAKE_INFLIGHT_MB":      {bad: []string{"many", "-1", "0", "1073741825"}, good: "7"},
		"RELAY_INTAKE_INFLIGHT_HOST_MB": {bad: []string{"many", "-1", "0", "1073741825"}, good: "7"},
		"RELAY_INTAKE_INFLIGHT_IP_MB":   {bad: []string{"many", "-1", "0", "1073741825"}, good: "7"},
	}
}

// derivedCase is the case of a number or duration setting without one.
func derivedCase(t *testing.T, f *flag.Flag) settingCase {
	t.Helper()
	switch f.Value.(flag.Getter).Get().(type) {
	case int:
		return settingCase{bad: []string{"many", "-1"}, good: "7"}
	case time.Duration:
		return settingCase{bad: []string{"7d", "-1s"}, good: "36h"}
	}
	t.Fatalf("-%s (%s): a string setting needs its bad values in settingCases", f.Name, settingEnv(t, f))
	return settingCase{}
}

// TestEverySettingChecked: for every setting of every command, each bad
// value — from the environment or from the flag — stops the command with
// exit code 2 and a message that names the variable (or the flag) and says
// what it wants, and never prints a secret; a good value passes.
func TestEverySettingChecked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // should a bad value pass, serve stops at once instead of serving
	for cmd, fs := range commandFlags(t) {
		fs.VisitAll(func(f *flag.Flag) {
			env := settingEnv(t, f)
			t.Run(cmd+"/"+env, func(t *testing.T) {
				dir := hermetic(t)
				c, ok := settingCases(t, dir)[env]
				if !ok {
					c = derivedCase(t, f)
				}
				for _, bad := range c.bad {
					t.Setenv(env, bad)
					var stderr bytes.Buffer
					code := run(ctx, []string{cmd}, &stderr)
					msg := stderr.String()
					require.Equal(t, 2, code, "%s=%q: %s", env, bad, msg)
					require.Contains(t, msg, env, "%s=%q: the message names the variable", env, bad)
					require.Contains(t, msg, "want", "%s=%q: the message says what it wants", env, bad)
					if c.secret {
						require.NotContains(t, msg, bad, "%s: a secret is never printed", env)
					}
					require.NotContains(t, msg, "pw@", "a database password is never printed")
					os.Unsetenv(env)

					stderr.Reset()
					code = run(ctx, []string{cmd, "-" + f.Name + "=" + bad}, &stderr)
					require.Equal(t, 2, code, "-%s=%q: %s", f.Name, bad, stderr.String())
					require.Contains(t, stderr.String(), "-"+f.Name, "-%s=%q: the message names the flag", f.Name, bad)
				}
				hermetic(t)
				t.Setenv(env, c.good)
				for k, v := range c.with {
					t.Setenv(k, v)
				}
				var o options
				_, err := o.parseFlags(o.flagSet(cmd), nil)
				require.NoError(t, err, "%s=%q is good", env, c.good)
			})
		})
	}
}

// TestSecretKeysOneSource: RELAY_SECRET_KEYS and RELAY_SECRET_KEYS_FILE
// together are a usage error.
func TestSecretKeysOneSource(t *testing.T) {
	dir := hermetic(t)
	path := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(path, []byte(key32(1)), 0o600))
	t.Setenv("RELAY_SECRET_KEYS_FILE", path)
	t.Setenv("RELAY_SECRET_KEYS", key32(2))
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"rekey"}, &stderr))
	require.Contains(t, stderr.String(), "either RELAY_SECRET_KEYS or RELAY_SECRET_KEYS_FILE, not both")
	require.NotContains(t, stderr.String(), key32(2))
}

// A plain-http public URL on a listener other machines reach is warned of
// at start; TLS served here, a loopback listener, or an https URL are not.
func TestPlainHTTPWarning(t *testing.T) {
	for _, c := range []struct {
		listen, public string
		tls            bool
		warn           bool
	}{
		{":8080", "http://relay.example.com", false, true},
		{"0.0.0.0:8080", "HTTP://relay.example.com", false, true},
		{":8080", "http://relay.example.com", true, false},
		{"127.0.0.1:8080", "http://127.0.0.1:8080", false, false},
		{":8080", "https://relay.example.com", false, false},
		{":8080", "", false, false},
	} {
		got := plainHTTPWarning(&options{listen: c.listen, publicURL: c.public}, c.tls)
		require.Equal(t, c.warn, got != "", "%+v", c)
	}
}

// A secret can come from a file (its path is no secret): read, a trailing
// line break dropped, and never both the file and the value.
func TestSecretFromFile(t *testing.T) {
	dir := hermetic(t)
	path := filepath.Join(dir, "token")
	token := strings.Repeat("k", 40)
	require.NoError(t, os.WriteFile(path, []byte(token+"\n"), 0o600))
	t.Setenv("RELAY_ADMIN_TOKEN_FILE", path)
	var o options
	_, err := o.parseFlags(o.flagSet("serve"), nil)
	require.NoError(t, err)
	require.Equal(t, token, o.adminToken)

	var o2 options
	_, err = o2.parseFlags(o2.flagSet("serve"), []string{"-admin-token=" + strings.Repeat("x", 40)})
	require.ErrorContains(t, err, "either RELAY_ADMIN_TOKEN or RELAY_ADMIN_TOKEN_FILE, not both")
	require.NotContains(t, err.Error(), strings.Repeat("x", 40))

	require.NoError(t, os.WriteFile(path, []byte("short\n"), 0o600))
	var o3 options
	_, err = o3.parseFlags(o3.flagSet("serve"), nil)
	require.ErrorContains(t, err, "RELAY_ADMIN_TOKEN: want at least 32 characters", "the file's value is checked as the value is")
}

// A secret given as a flag is warned of, never printed; the same from the
// environment, or a database URL without a password, is not.
func TestSecretFlagWarnings(t *testing.T) {
	hermetic(t)
	var o options
	fs := o.flagSet("serve")
	token, jwt := strings.Repeat("t", 40), strings.Repeat("j", 40)
	require.NoError(t, fs.Parse([]string{"-admin-token=" + token, "-jwt-key=" + jwt,
		"-database-url=postgres://relay:pw@db.example.com/relay", "-listen=:9090"}))
	ws := secretFlagWarnings(fs)
	require.Len(t, ws, 3, "%q", ws)
	all := strings.Join(ws, "\n")
	for _, want := range []string{"-admin-token given on the command line", "-jwt-key given", "-database-url given", "PGPASSFILE"} {
		require.Contains(t, all, want)
	}
	for _, secret := range []string{token, jwt, "pw@"} {
		require.NotContains(t, all, secret)
	}
	var o2 options
	fs = o2.flagSet("serve")
	require.NoError(t, fs.Parse([]string{"-database-url=postgres://relay@db.example.com/relay"}))
	require.Empty(t, secretFlagWarnings(fs))
}

func TestLoopbackListen(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "relay.example.com:80": false,
	} {
		require.Equal(t, want, loopbackListen(addr), addr)
	}
}

// TestNewNumberSettingsChecked: a number or duration setting without a
// check of its own still refuses a negative value from its flag, as envInt
// and envDuration refuse one from the environment.
func TestNewNumberSettingsChecked(t *testing.T) {
	hermetic(t)
	for _, arg := range []string{"-some-limit=-1", "-some-wait=-1s"} {
		var o options
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		o.register(fs, true)
		fs.Int("some-limit", 5, "a limit (RELAY_SOME_LIMIT)")
		fs.Duration("some-wait", time.Second, "a wait (RELAY_SOME_WAIT)")
		_, err := o.parseFlags(fs, []string{arg})
		require.ErrorContains(t, err, arg[:strings.Index(arg, "=")+1], arg)
		require.ErrorContains(t, err, "0 or more", arg)
		var ue usageError
		require.ErrorAs(t, err, &ue)
	}
}

// A bad OTEL_EXPORTER_OTLP_ENDPOINT stops serve before it starts, naming
// the variable.
func TestBadOTLPEndpoint(t *testing.T) {
	hermetic(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	require.Equal(t, 2, run(ctx, []string{"serve"}, &stderr), stderr.String())
	require.Contains(t, stderr.String(), "OTEL_EXPORTER_OTLP_ENDPOINT")
	require.Contains(t, stderr.String(), "want")
}

// usageCommands are the commands the top-level usage lists.
func usageCommands(t *testing.T) []string {
	t.Helper()
	_, list, ok := strings.Cut(usage, "commands:\n")
	require.True(t, ok)
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, line := range strings.Split(list, "\n") {
		if strings.HasPrefix(line, "  ") && line[2] != ' ' {
			names = append(names, strings.Fields(line)[0])
		}
	}
	return names
}

// TestEveryCommandHelp: every command the usage lists answers -h, -help
// and --help with its own usage, what it does and every one of its flags,
// on stdout, exit 0, and starts nothing; a secret set in the environment
// is never printed as a default.
func TestEveryCommandHelp(t *testing.T) {
	dir := hermetic(t)
	t.Setenv("RELAY_ADMIN_TOKEN", strings.Repeat("s3cret", 6))
	t.Setenv("RELAY_DATABASE_URL", "postgres://relay:pw@db.example.com/relay")
	names := usageCommands(t)
	require.ElementsMatch(t, []string{"serve", "migrate", "rekey", "backup", "health", "ctl", "version"}, names)
	for _, name := range names {
		for _, h := range []string{"-h", "-help", "--help"} {
			t.Run(name+"/"+h, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				code := runIO(context.Background(), []string{name, h}, &stdout, &stderr)
				out := stdout.String()
				require.Equal(t, 0, code, "stderr: %s", stderr.String())
				require.Empty(t, stderr.String())
				require.True(t, strings.HasPrefix(out, "usage: cloud "+name), "its own usage first:\n%s", out)
				require.NotContains(t, out, "s3cret", "a secret is never printed")
				require.NotContains(t, out, "pw@", "a database password is never printed")
				if _, ok := commands[name]; !ok {
					return // ctl (its own tests) and version: no settings
				}
				require.Contains(t, out, commands[name].about)
				var o options
				o.flagSet(name).VisitAll(func(f *flag.Flag) {
					require.Contains(t, out, "  -"+f.Name+" ", "-%s is listed", f.Name)
					require.Contains(t, out, settingEnv(t, f), "-%s names its variable", f.Name)
				})
			})
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "help opened no database and wrote no key")

	var stdout bytes.Buffer
	require.Equal(t, 0, runIO(context.Background(), []string{"rekey", "-h"}, &stdout, io.Discard))
	require.Contains(t, stdout.String(), "alert sinks")
	require.Contains(t, stdout.String(), "RELAY_SECRET_KEYS_FILE")
	require.Contains(t, usage, "RELAY_SECRET_KEYS_FILE", "the usage's line for rekey names the keys file")
}

// TestBadFlagOnce: a flag a command does not have is reported once, on
// stderr, with where to find the flags; nothing goes to stdout.
func TestBadFlagOnce(t *testing.T) {
	hermetic(t)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, runIO(context.Background(), []string{"migrate", "-bogus"}, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "-bogus"), stderr.String())
	require.Contains(t, stderr.String(), "cloud migrate -h")
}
