package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// fakeCloud is a cloud for `host run`: it hands out token, answers each
// heartbeat with beat, and the paths of answers with theirs; anything else
// with an empty 200.
func fakeCloud(t *testing.T, token string, beat func(shared.HeartbeatRequest) shared.HeartbeatResponse, answers map[string]any) *httptest.Server {
	t.Helper()
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case shared.PathToken:
			json.NewEncoder(w).Encode(shared.TokenResponse{Token: token, TokenExpiresAt: time.Now().Add(15 * time.Minute)})
		case shared.PathHeartbeat:
			var req shared.HeartbeatRequest
			json.NewDecoder(r.Body).Decode(&req)
			json.NewEncoder(w).Encode(beat(req))
		default:
			if v, ok := answers[r.URL.Path]; ok {
				json.NewEncoder(w).Encode(v)
			}
		}
	}))
	t.Cleanup(cloud.Close)
	return cloud
}

// startRun runs `host run` with cfg and state on ctx in the background, and
// gives its stderr and, once it ends, its exit code.
func startRun(ctx context.Context, cfg, state string) (*syncBuffer, <-chan int) {
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"run", "--config", cfg, "--state", state, "--listen", "127.0.0.1:0"}, io.Discard, &stderr, noEnv)
	}()
	return &stderr, exit
}

// requireExit waits for `host run` to end with code.
func requireExit(t *testing.T, exit <-chan int, code int, stderr *syncBuffer) {
	t.Helper()
	select {
	case got := <-exit:
		require.Equal(t, code, got, stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("host run did not stop")
	}
}

func claimedState(t *testing.T, cloudURL string) string {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, config.WriteCredentials(state, config.Credentials{CloudURL: cloudURL, HostID: "h_1", HostCredential: "cred"}))
	return state
}

func TestRunCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := claimedState(t, "https://relay.example.com")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agent.sh"), []byte("#!/bin/sh\n"), 0o755))
	good := writeFile(t, dir, "good.json", `{"webhooks": {
		"github": {"enabled": true, "events": ["pull_request", "push"], "forward": "http://127.0.0.1:3000/gh"},
		"slack": {"enabled": true, "parallel": true, "routes": [{"events": ["app_mention"], "exec": ["./agent.sh"]}]},
		"stripe": {"enabled": false}}}`)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--check", "--offline", "--config", good, "--state", state}, &stdout, &stderr, noEnv)
	require.Equal(t, exitOK, code, stderr.String())
	out := stdout.String()
	require.Contains(t, out, "configuration OK: "+good)
	require.Contains(t, out, "host h_1, cloud https://relay.example.com")
	require.Contains(t, out, "credential not checked with the cloud (--offline)")
	require.Contains(t, out, "github: enabled, in order, pull_request, push\n    * → forward http://127.0.0.1:3000/gh (timeout 30s)")
	require.Contains(t, out, "slack: enabled, parallel, every event\n    app_mention → exec "+filepath.Join(dir, "agent.sh")+" (timeout 10m0s)")
	require.Contains(t, out, "stripe: disabled")
	_, err := os.Stat(filepath.Join(state, ledgerFile))
	require.ErrorIs(t, err, os.ErrNotExist, "--check opens no ledger")

	stdout.Reset()
	bad := writeFile(t, dir, "bad.json", `{"webhooks": {"github": {"enabled": true, "events": ["pull request"], "forward": "http://x"}}}`)
	code = run(context.Background(), []string{"run", "--config", bad, "--check", "--state", state}, &stdout, &stderr, noEnv)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), `webhooks.github.events[0]: invalid event name "pull request"`)
	require.Empty(t, stdout.String())

	stderr.Reset()
	code = run(context.Background(), []string{"run", "--config", good, "--check", "--state", t.TempDir()}, &stdout, &stderr, noEnv)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "run `host claim` first")
}

func TestRunRejectsUnknownFaultPoint(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		if k == envTestCrash {
			return "before-lunch"
		}
		return ""
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", "x.json"}, io.Discard, &stderr, env)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), `RELAY_HOST_TEST_CRASH="before-lunch": want after-handler or after-ledger`)
}

// TestRunRevokedHostExits3: a host whose credential the cloud refuses stops
// at once with a clear message and exit code 3, which a supervisor can be
// told not to restart on.
func TestRunRevokedHostExits3(t *testing.T) {
	t.Parallel()
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		json.NewEncoder(w).Encode(shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeGone, Message: "host is deactivated"}})
	}))
	t.Cleanup(cloud.Close)
	dir := t.TempDir()
	state := claimedState(t, cloud.URL)
	cfg := writeFile(t, dir, "host.json", `{"webhooks": {}}`)
	stderr, exit := startRun(context.Background(), cfg, state)
	requireExit(t, exit, exitRevoked, stderr)
	require.Contains(t, stderr.String(), "host run: host credential refused by the cloud (host deactivated or revoked); claim the host again")
	require.Contains(t, stderr.String(), "host is deactivated")
}

func seedLedger(t *testing.T, state string) {
	t.Helper()
	l, err := ledger.Open(context.Background(), filepath.Join(state, ledgerFile))
	require.NoError(t, err)
	defer l.Close()
	now := time.Now().UTC()
	status, code := 200, 3
	for _, e := range []ledger.Entry{
		{DeliveryID: "github:old:1", Source: "github", EventType: "push", Result: ledger.ResultSuccess,
			ProcessedAt: now.Add(-3 * time.Hour), Summary: "push acme/app (main)"},
		{DeliveryID: "github:pr:1", Source: "github", EventType: "pull_request", EventAction: "opened",
			Result: ledger.ResultSuccess, ProcessedAt: now.Add(-time.Minute), DurationMS: 120, CloudAttempt: 1,
			Handler: "forward http://127.0.0.1:3000/gh", ResponseStatus: &status, Output: "ok",
			Summary: "pull_request.opened acme/app #7", Fields: map[string]string{"github.repo": "acme/app", "github.number": "7"}},
		{DeliveryID: "slack:ev1:1", Source: "slack", EventType: "event_callback", Result: ledger.ResultError,
			ProcessedAt: now.Add(-30 * time.Second), Handler: "exec agent.sh", ExitCode: &code,
			Error: "exit 3: no token", Output: "starting\nno token", CloudAttempt: 2,
			Summary: "event_callback message in C1 thread 1.2", Fields: map[string]string{"slack.thread_ts": "1.2", "slack.channel": "C1"}},
	} {
		_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: e, Retryable: true})
		require.NoError(t, err)
	}
}

func ledgerCmd(t *testing.T, state string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := func(k string) string {
		if k == config.EnvState {
			return state
		}
		return ""
	}
	code := run(context.Background(), append([]string{"ledger"}, args...), &stdout, &stderr, env)
	return code, stdout.String(), stderr.String()
}

func TestLedgerCommands(t *testing.T) {
	t.Parallel()
	state := claimedState(t, "https://relay.example.com")
	code, _, stderr := ledgerCmd(t, state, "list")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no ledger at "+filepath.Join(state, ledgerFile))
	_, err := os.Stat(filepath.Join(state, ledgerFile))
	require.ErrorIs(t, err, os.ErrNotExist, "reading never creates the ledger")

	seedLedger(t, state)
	code, out, stderr := ledgerCmd(t, state, "list")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4)
	require.Regexp(t, `^PROCESSED\s+RESULT\s+SOURCE\s+EVENT\s+TRIES\s+TOOK\s+DELIVERY\s+SUMMARY / ERROR$`, lines[0])
	require.Regexp(t, `Z\s+error\s+slack\s+event_callback\s+1\s+0s\s+slack:ev1:1\s+exit 3: no token$`, lines[1])
	require.Regexp(t, `Z\s+success\s+github\s+pull_request.opened\s+1\s+120ms\s+github:pr:1\s+pull_request.opened acme/app #7$`, lines[2])

	code, out, _ = ledgerCmd(t, state, "list", "--result", "error")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "slack:ev1:1")
	require.NotContains(t, out, "github:")

	code, out, _ = ledgerCmd(t, state, "list", "--source", "github", "--since", "1h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "github:pr:1")
	require.NotContains(t, out, "github:old:1")
	require.NotContains(t, out, "slack")

	code, out, _ = ledgerCmd(t, state, "list", "--limit", "1")
	require.Equal(t, exitOK, code)
	cursor := out[strings.Index(out, "--cursor ")+len("--cursor "):]
	code, out, _ = ledgerCmd(t, state, "list", "--limit", "5", "--cursor", strings.TrimSpace(cursor), "--json")
	require.Equal(t, exitOK, code)
	var page struct {
		Entries    []ledger.Entry `json:"entries"`
		NextCursor string         `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Entries, 2)
	require.Equal(t, "github:pr:1", page.Entries[0].DeliveryID)
	require.Empty(t, page.NextCursor)

	code, out, _ = ledgerCmd(t, state, "list", "--source", "nope")
	require.Equal(t, exitOK, code)
	require.Equal(t, "no deliveries\n", out)

	// show: the flags may follow the id.
	code, out, stderr = ledgerCmd(t, state, "show", "slack:ev1:1", "--state", state)
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{
		`(?m)^delivery:\s+slack:ev1:1$`, `(?m)^result:\s+error$`, `(?m)^error:\s+exit 3: no token$`,
		`(?m)^exit code:\s+3$`, `(?m)^attempts:\s+1 here \(cloud attempt 2\)$`, `(?m)^slack.channel:\s+C1$`,
		`(?m)^slack.thread_ts:\s+1.2$`, `(?m)^output:\n  starting\n  no token\n`,
	} {
		require.Regexp(t, want, out)
	}
	code, out, _ = ledgerCmd(t, state, "show", "--json", "github:pr:1")
	require.Equal(t, exitOK, code)
	var e ledger.Entry
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	require.Equal(t, 200, *e.ResponseStatus)
	require.Equal(t, "7", e.Fields["github.number"])

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"show", "github:none:1"}, exitFailure, `delivery "github:none:1" is not in the ledger`},
		{[]string{"show"}, exitUsage, "give one delivery id"},
		{[]string{"show", "a", "b"}, exitUsage, "give one delivery id"},
		{[]string{"list", "--result", "fine"}, exitUsage, `--result "fine"`},
		{[]string{"list", "--since", "soon"}, exitUsage, `invalid since "soon"`},
		{[]string{"list", "--limit", "0"}, exitUsage, "--limit 0"},
		{[]string{"list", "--cursor", "!!"}, exitUsage, "--cursor"},
		{[]string{"list", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"prune"}, exitUsage, `unknown command "prune"`},
		{nil, exitUsage, "list or show?"},
	} {
		code, _, stderr := ledgerCmd(t, state, tc.args...)
		require.Equal(t, tc.code, code, "%q", tc.args)
		require.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}

// TestReloadOnSIGHUP: a running host re-reads its configuration on SIGHUP
// and sends the changed subscription in its next heartbeat; a broken file is
// refused and the running configuration kept.
func TestReloadOnSIGHUP(t *testing.T) {
	// Not parallel: it signals the test process itself.
	configs := make(chan *shared.Subscription, 20)
	var beats atomic.Int64
	cloud := fakeCloud(t, "tok", func(req shared.HeartbeatRequest) shared.HeartbeatResponse {
		if req.Config != nil {
			configs <- req.Config
		}
		beats.Add(1)
		return shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
	}, map[string]any{shared.PathHostSources: shared.HostSourcesResponse{Sources: []shared.HostSource{
		{Name: "github", Provider: "github", Enabled: true, Events: []string{}},
		{Name: "slack", Provider: "slack", Enabled: true, Events: []string{}}}}})
	dir := t.TempDir()
	state := claimedState(t, cloud.URL)
	cfg := writeFile(t, dir, "host.json", `{"heartbeat_interval_s": 1, "webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:9/x"}}}`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, exit := startRun(ctx, cfg, state)
	next := func() *shared.Subscription {
		t.Helper()
		select {
		case sub := <-configs:
			return sub
		case <-time.After(10 * time.Second):
			t.Fatalf("no subscription sent; logs:\n%s", stderr.String())
			return nil
		}
	}
	require.Equal(t, []string{"github"}, keys(next().Webhooks))
	// At start its sources are compared with the cloud's: slack is missing.
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), `msg="source differs from the cloud's" kind=not-on-host source=slack`)
	},
		10*time.Second, 10*time.Millisecond)

	// A broken file (github has no handler) is refused: the stripe source it
	// adds is never sent, even heartbeats later.
	writeFile(t, dir, "host.json", `{"webhooks": {"github": {"enabled": true}, "stripe": {"enabled": true, "exec": ["/bin/true"]}}}`)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "reload refused") }, 10*time.Second, 10*time.Millisecond)
	seen := beats.Load()
	require.Eventually(t, func() bool { return beats.Load() >= seen+2 }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, configs)

	// So is one whose exec program does not exist beside it.
	writeFile(t, dir, "host.json", `{"webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:9/x"},
		"deploy": {"enabled": true, "exec": ["./on-deploy.sh"]}}}`)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Count(stderr.String(), "reload refused") == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, stderr.String(), `webhooks.deploy.exec: \"./on-deploy.sh\" (`+filepath.Join(dir, "on-deploy.sh")+`): no such file`)
	seen = beats.Load()
	require.Eventually(t, func() bool { return beats.Load() >= seen+2 }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, configs)

	writeFile(t, dir, "host.json", `{"heartbeat_interval_s": 1, "webhooks": {
		"github": {"enabled": true, "forward": "http://127.0.0.1:9/x"},
		"slack": {"enabled": true, "routes": [{"events": ["app_mention"], "exec": ["/bin/true"]}]}}}`)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	sub := next()
	require.Equal(t, []string{"github", "slack"}, keys(sub.Webhooks))
	require.Equal(t, []string{"app_mention"}, sub.Webhooks["slack"].Events)
	require.Contains(t, stderr.String(), `msg="configuration reloaded" sources="[github slack]"`)
	// The reload is compared in turn; the refused ones were not.
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), `msg="sources match the cloud's" cloud_sources=2`)
	},
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, strings.Count(stderr.String(), "source differs from the cloud's"), stderr.String())

	cancel()
	requireExit(t, exit, exitOK, stderr)
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
