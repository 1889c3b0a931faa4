package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/host/ledger"
)

// TestLedgerTableEscapesControlCharacters: text from payloads, answers and
// programs reaches `host ledger list/show` escaped, so an escape sequence in
// it cannot drive the operator's terminal; --json stays the stored text.
func TestLedgerTableEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	state := claimedState(t, "https://relay.example.com")
	l, err := ledger.Open(context.Background(), filepath.Join(state, ledgerFile))
	require.NoError(t, err)
	code := 1
	for _, e := range []ledger.Entry{
		{DeliveryID: "github:evil:1", Source: "github", EventType: "push\x1b[2J", EventAction: "x\x07",
			Result: ledger.ResultSuccess, ProcessedAt: time.Now().UTC().Add(-time.Minute), Handler: "exec a.sh",
			Summary: "push \x1b]0;owned\x07 acme/app \u202egnp.exe", Output: "line 1\r\x1b[1A\x1b[2Kline 2\n\tok \xff",
			Fields: map[string]string{"github.repo": "acme/\x1b[8mapp", "github.\x1bx": "v"}, ExitCode: &code},
		{DeliveryID: "github:evil:2", Source: "github", EventType: "push", Result: ledger.ResultError,
			ProcessedAt: time.Now().UTC(), Error: "exit 1: \x1b[31mred\u009b1m", Output: "\x1b[31mred"},
	} {
		_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: e, Retryable: true})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())

	code, out, stderr := ledgerCmd(t, state, "list")
	require.Equal(t, exitOK, code, stderr)
	requireNoControl(t, out, "\n")
	require.Contains(t, out, `push\x1b[2J.x\a`)
	require.Contains(t, out, `push \x1b]0;owned\a acme/app \u202egnp.exe`)
	require.Contains(t, out, `exit 1: \x1b[31mred\u009b1m`)

	code, out, stderr = ledgerCmd(t, state, "show", "github:evil:1")
	require.Equal(t, exitOK, code, stderr)
	requireNoControl(t, out, "\n\t")
	require.Regexp(t, `(?m)^event:\s+push\\x1b\[2J\.x\\a$`, out)
	require.Regexp(t, `(?m)^github.repo:\s+acme/\\x1b\[8mapp$`, out)
	require.Regexp(t, `(?m)^github.\\x1bx:\s+v$`, out)
	require.Contains(t, out, "output:\n  line 1\\r\\x1b[1A\\x1b[2Kline 2\n  \tok \\xff\n")

	code, out, _ = ledgerCmd(t, state, "show", "github:evil:1", "--json")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"output": "line 1\r\u001b[1A\u001b[2Kline 2\n\tok \ufffd"`, "JSON escapes by itself")
}

// requireNoControl: out has no control character but those in keep.
func requireNoControl(t *testing.T, out, keep string) {
	t.Helper()
	for _, r := range out {
		if strings.ContainsRune(keep, r) {
			continue
		}
		require.False(t, r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x202e || r == '\uFFFD', "%q in %q", r, out)
	}
}

// TestClaimRefusesPlainHTTPToAnotherMachine: the claim code and the host's
// credential do not go in clear to another machine unless --insecure-http
// says so (and then a warning says what it means); a cloud on this machine
// may be plain http.
func TestClaimRefusesPlainHTTPToAnotherMachine(t *testing.T) {
	t.Parallel()
	for _, cloud := range []string{"http://relay.example.com", "http://192.0.2.1:8080/", "http://user:pw@10.0.0.5", "http://127.0.0.1.nip.io"} {
		var stdout, stderr bytes.Buffer
		state := t.TempDir()
		code := run(context.Background(), []string{"claim", "--cloud", cloud, "--code", "good", "--state", state}, &stdout, &stderr, noEnv)
		require.Equal(t, exitUsage, code, cloud)
		require.Contains(t, stderr.String(), "plain http to another machine", cloud)
		require.Contains(t, stderr.String(), "--insecure-http", cloud)
		require.NotContains(t, stderr.String(), "pw", "the URL's password is not echoed")
		_, err := config.ReadCredentials(state)
		require.Error(t, err, "nothing stored")
	}

	// With the flag the claim is attempted (here, canceled before it leaves).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	code := run(ctx, []string{"claim", "--cloud", "http://192.0.2.1:8080", "--code", "good", "--state", t.TempDir(), "--insecure-http"},
		&bytes.Buffer{}, &stderr, noEnv)
	require.Equal(t, exitFailure, code, stderr.String())
	require.Contains(t, stderr.String(), "warning: --insecure-http: the claim code, the host's credential and every webhook travel to http://192.0.2.1:8080 in clear")

	// On this machine, plain http is fine without it.
	srv := fakeClaimCloud(t)
	for _, cloud := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"claim", "--cloud", cloud, "--code", "good", "--state", t.TempDir()}, &stdout, &stderr, noEnv)
		require.Equal(t, exitOK, code, stderr.String())
		require.NotContains(t, stderr.String(), "warning")
	}
}

// TestLocalAPIServerTimeouts: no client holds the local API's connections
// open for as long as it likes.
func TestLocalAPIServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := localAPIServer(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		require.Positive(t, d, name)
		require.LessOrEqual(t, d, time.Minute, name)
	}
	require.Positive(t, srv.MaxHeaderBytes)
}

// TestClaimCodeOutOfTheProcessList: the claim code can come from a file or
// the environment instead of --code; from one place only.
func TestClaimCodeOutOfTheProcessList(t *testing.T) {
	t.Parallel()
	srv := fakeClaimCloud(t)
	file := filepath.Join(t.TempDir(), "code")
	require.NoError(t, os.WriteFile(file, []byte("good\n"), 0o600))
	envCode := func(k string) string {
		if k == "RELAY_CLAIM_CODE" {
			return "good"
		}
		return ""
	}
	for name, c := range map[string]struct {
		args []string
		env  func(string) string
		exit int
		msg  string
	}{
		"file":        {[]string{"--code-file", file}, noEnv, exitOK, ""},
		"environment": {nil, envCode, exitOK, ""},
		"both":        {[]string{"--code", "good"}, envCode, exitUsage, "give the claim code once"},
		"no file":     {[]string{"--code-file", file + ".missing"}, noEnv, exitUsage, "--code-file:"},
		"none":        {nil, noEnv, exitUsage, "--cloud and --code (or $RELAY_CLAIM_CODE, or --code-file) are required"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"claim", "--cloud", srv.URL, "--state", t.TempDir()}, c.args...)
		require.Equal(t, c.exit, run(context.Background(), args, &stdout, &stderr, c.env), "%s: %s", name, stderr.String())
		require.Contains(t, stderr.String(), c.msg, name)
	}
}
