package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/shared"
)

func noEnv(string) string { return "" }

// syncBuffer is a bytes.Buffer safe to read while the command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil,
		{"dance"},
		{"claim"},
		{"claim", "--cloud", "https://relay.example.com"},
		{"claim", "--cloud", "relay.example.com", "--code", "c"},
		{"claim", "--bogus"},
		{"run"},
		{"run", "--config", "x.json", "extra"},
		{"run", "--config", "x.json", "--log-level", "loud"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr, noEnv)
		require.Equal(t, exitUsage, code, "%q", args)
		require.NotEmpty(t, stderr.String(), "%q", args)
	}
}

// TestHelpOfEachCommand: every command answers -h and --help with its own
// usage line and flags on stdout, and exits 0; the global usage is not it.
func TestHelpOfEachCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		usage string   // the first line
		flags []string // each listed
	}{
		{[]string{"claim"}, "usage: host claim --cloud URL --code CODE", []string{"--cloud string", "--code string", "--state string", "--insecure-http"}},
		{[]string{"run"}, "usage: host run --config FILE [--check [--offline]]", []string{"--config string", "--check", "--offline", "--state string", "--listen string", "--log-level string"}},
		{[]string{"ledger"}, "usage:\n  host ledger list [--result", []string{"host ledger show DELIVERY_ID [--json] [--state DIR]"}},
		{[]string{"ledger", "list"}, "usage: host ledger list [--result", []string{"--result string", "--source string", "--since string", "--limit int", "--cursor string", "--json", "--state string"}},
		{[]string{"ledger", "show"}, "usage: host ledger show DELIVERY_ID", []string{"--json", "--state string"}},
		{[]string{"reconcile"}, "usage: host reconcile [--since 24h|TIME]", []string{"--since string", "--fix", "--json", "--state string", "--cloud URL"}},
		{[]string{"health"}, "usage: host health [--listen ADDR]", []string{"--listen string"}},
		{[]string{"version"}, "usage: host version", nil},
	} {
		for _, help := range []string{"-h", "--help"} {
			args := append(slices.Clone(tc.args), help)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr, noEnv)
			require.Equal(t, exitOK, code, "%q: %s", args, stderr.String())
			require.Empty(t, stderr.String(), "%q", args)
			out := stdout.String()
			require.True(t, strings.HasPrefix(out, tc.usage), "%q: %s", args, out)
			for _, f := range tc.flags {
				require.Contains(t, out, "\n  "+f+"\n", "%q", args)
			}
			if len(tc.args) > 0 && tc.args[0] != "ledger" {
				require.NotContains(t, out, "host ledger", "%q: its own usage, not the global one", args)
			}
		}
	}
	// A flag that does not parse: the error and the command's usage line
	// on stderr, exit 2.
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"ledger", "list", "--bogus"}, &stdout, &stderr, noEnv)
	require.Equal(t, exitUsage, code)
	require.Empty(t, stdout.String())
	require.Equal(t, "flag provided but not defined: -bogus\nusage: "+synopsis("ledger list")+"\n", stderr.String())
	// The global usage lists every command's synopsis.
	stdout.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"-h"}, &stdout, &stderr, noEnv))
	for _, s := range synopses {
		require.Contains(t, stdout.String(), synopsis(s.name))
	}
}

func fakeClaimCloud(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req shared.ClaimRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != shared.PathClaim || req.ClaimCode != "good" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeNotFound, Message: "claim code unknown or expired"}})
			return
		}
		json.NewEncoder(w).Encode(shared.ClaimResponse{HostID: "h_123", HostCredential: "s3cret", Token: "t", HeartbeatIntervalS: 30})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestClaim(t *testing.T) {
	t.Parallel()
	srv := fakeClaimCloud(t)
	dir := filepath.Join(t.TempDir(), "state")
	env := func(k string) string {
		if k == config.EnvState {
			return dir
		}
		return ""
	}

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"claim", "--cloud", srv.URL + "/", "--code", "good"}, &stdout, &stderr, env)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, "h_123\n", stdout.String())
	require.NotContains(t, stderr.String(), "s3cret")

	creds, err := config.ReadCredentials(dir)
	require.NoError(t, err)
	require.Equal(t, config.Credentials{CloudURL: srv.URL, HostID: "h_123", HostCredential: "s3cret"}, creds)
	st, err := os.Stat(filepath.Join(dir, config.CredentialsFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"claim", "--cloud", srv.URL, "--code", "bad", "--state", t.TempDir()}, &stdout, &stderr, noEnv)
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr.String(), "claim code unknown or expired")
	require.Empty(t, stdout.String())
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestRunConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	require.NoError(t, config.WriteCredentials(state, config.Credentials{HostID: "h", HostCredential: "c"}))
	empty := t.TempDir()

	for _, tc := range []struct {
		name, config, state, want string
	}{
		{"unknown key", `{"webhookz": {}}`, state, `unknown top-level key "webhookz"`},
		{"handler missing", `{"cloud_url": "http://x", "webhooks": {"github": {"enabled": true}}}`, state, "enabled but has no handler"},
		{"no cloud url anywhere", `{}`, state, "cloud URL"},
		{"not claimed", `{"cloud_url": "http://x"}`, empty, "run `host claim` first"},
		{"exec program missing", `{"cloud_url": "http://x", "webhooks": {"deploy": {"enabled": true, "exec": ["./on-deploy.sh"]}}}`, state,
			`webhooks.deploy.exec: "./on-deploy.sh" (` + filepath.Join(dir, "on-deploy.sh") + `): no such file`},
	} {
		cfg := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".json", tc.config)
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"run", "--config", cfg, "--state", tc.state, "--listen", "127.0.0.1:0"}, io.Discard, &stderr, noEnv)
		require.Equal(t, exitUsage, code, tc.name)
		require.Contains(t, stderr.String(), tc.want, tc.name)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", filepath.Join(dir, "missing.json")}, io.Discard, &stderr, noEnv)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "read config")
}

// TestRunEndToEnd drives `host run` against a cloud stand-in and a local app:
// the webhook is forwarded byte-exact, recorded, visible in the local API,
// acked, and the command stops cleanly when its context ends.
func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	body := "{\"msg\":\"héllo\"}\n"
	delivered := make(chan []byte, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		delivered <- b
	}))
	t.Cleanup(app.Close)

	acked := make(chan []string, 10)
	var mu sync.Mutex
	sent := false
	cloud := fakeCloud(t, "tok-s3cret", func(req shared.HeartbeatRequest) shared.HeartbeatResponse {
		if len(req.WebhookAcks) > 0 {
			acked <- req.WebhookAcks
		}
		resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
		mu.Lock()
		if !sent {
			sent = true
			resp.Webhooks = []shared.Webhook{{DeliveryID: "github:e1:1", Source: "github", EventType: "push",
				Headers: map[string]string{"x-github-event": "push"}, RawBody: []byte(body), Attempt: 1}}
		}
		mu.Unlock()
		return resp
	}, nil)

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	require.NoError(t, config.WriteCredentials(state, config.Credentials{CloudURL: cloud.URL, HostID: "h", HostCredential: "cred-s3cret"}))
	cfg := writeFile(t, dir, "host.json", `{"heartbeat_interval_s": 30, "webhooks": {
		"github": {"enabled": true, "forward": "`+app.URL+`/hook"}}}`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, exit := startRun(ctx, cfg, state)

	select {
	case got := <-delivered:
		require.Equal(t, []byte(body), got)
	case <-time.After(10 * time.Second):
		t.Fatalf("webhook not forwarded; logs:\n%s", stderr.String())
	}
	select {
	case ids := <-acked:
		require.Equal(t, []string{"github:e1:1"}, ids)
	case <-time.After(10 * time.Second):
		t.Fatalf("no ack; logs:\n%s", stderr.String())
	}

	addr := regexp.MustCompile(`msg="local API listening" addr=(\S+)`).FindStringSubmatch(stderr.String())
	require.NotNil(t, addr, stderr.String())
	require.Contains(t, stderr.String(), `msg="host agent started"`)
	resp, err := http.Get("http://" + addr[1] + "/webhooks/ledger/github:e1:1")
	require.NoError(t, err)
	var e struct {
		Result string `json:"result"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	require.Equal(t, "success", e.Result)

	cancel()
	requireExit(t, exit, exitOK, stderr)
	require.NotContains(t, stderr.String(), "s3cret", "no credential or token in the logs")
}
