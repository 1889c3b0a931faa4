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
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/shared"
)

// tokenCloud stands in for the cloud's token endpoint: host h_1 with
// credential "cred" gets a token, host h_gone is deactivated, anything else
// is refused; status, if set, is answered to everyone.
type tokenCloud struct {
	url      string
	requests atomic.Int32
	status   atomic.Int32
	// sources, when set, answers GET /api/hosts/sources to h_1's token;
	// else that path is unknown (a cloud that predates it).
	sources []shared.HostSource
}

func startTokenCloud(t *testing.T, sources ...shared.HostSource) *tokenCloud {
	tc := &tokenCloud{sources: sources}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc.requests.Add(1)
		if r.URL.Path == shared.PathHostSources && tc.sources != nil && r.Header.Get("Authorization") == "Bearer tok-s3cret" {
			json.NewEncoder(w).Encode(shared.HostSourcesResponse{Sources: tc.sources})
			return
		}
		var req shared.TokenRequest
		if r.URL.Path != shared.PathToken || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fail := func(status int, code, msg string) {
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(shared.ErrorResponse{Error: shared.ErrorDetail{Code: code, Message: msg}})
		}
		switch {
		case tc.status.Load() != 0:
			fail(int(tc.status.Load()), "unavailable", "database unavailable")
		case req.HostID == "h_gone" && req.HostCredential == "cred":
			fail(http.StatusGone, shared.CodeGone, "host is deactivated")
		case req.HostID != "h_1" || req.HostCredential != "cred":
			fail(http.StatusUnauthorized, "unauthorized", "unknown host or wrong credential")
		default:
			json.NewEncoder(w).Encode(shared.TokenResponse{Token: "tok-s3cret", TokenExpiresAt: time.Now().Add(15 * time.Minute)})
		}
	}))
	t.Cleanup(srv.Close)
	tc.url = srv.URL
	return tc
}

// TestRunCheckAsksTheCloud: `run --check` exchanges the credential for a
// token, and exits as `host run` would: 0 when the cloud accepts it, 3 when
// the cloud refuses it (wrong or deactivated), 1 when the cloud cannot say.
// --offline checks the files without contacting the cloud.
func TestRunCheckAsksTheCloud(t *testing.T) {
	t.Parallel()
	tc := startTokenCloud(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "host.json", `{"webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:3000/gh"}}}`)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	notRelay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html>welcome</html>")
	}))
	t.Cleanup(notRelay.Close)

	check := func(cloudURL, hostID, credential string, extra ...string) (int, string, string) {
		t.Helper()
		state := filepath.Join(t.TempDir(), "state")
		require.NoError(t, config.WriteCredentials(state, config.Credentials{CloudURL: cloudURL, HostID: hostID, HostCredential: credential}))
		var stdout, stderr bytes.Buffer
		args := append([]string{"run", "--check", "--config", cfg, "--state", state}, extra...)
		code := run(context.Background(), args, &stdout, &stderr, noEnv)
		require.NotContains(t, stdout.String()+stderr.String(), "s3cret", "no credential or token printed")
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := check(tc.url, "h_1", "cred")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "configuration OK: "+cfg)
	require.Contains(t, out, "credential accepted by the cloud")
	require.Contains(t, out, "github: enabled")

	code, out, errOut = check(tc.url, "h_1", "wrong-s3cret")
	require.Equal(t, exitRevoked, code)
	require.Empty(t, out)
	require.Contains(t, errOut, cfg+" is valid, but the cloud at "+tc.url+" does not accept host h_1's credential (401: unknown host or wrong credential)")
	require.Contains(t, errOut, "credentials.json is not the one `host claim` wrote; claim the host again")

	code, _, errOut = check(tc.url, "h_gone", "cred")
	require.Equal(t, exitRevoked, code)
	require.Contains(t, errOut, "the cloud at "+tc.url+" refuses host h_gone's credential (410: host is deactivated); claim the host again")

	code, _, errOut = check(closed.URL, "h_1", "cred")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "the cloud at "+closed.URL+" cannot be reached: ")
	require.Contains(t, errOut, "connection refused")

	code, _, errOut = check(notRelay.URL, "h_1", "cred")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "the answer of "+notRelay.URL+" is not a relay cloud's")

	tc.status.Store(http.StatusServiceUnavailable)
	code, _, errOut = check(tc.url, "h_1", "cred")
	require.Equal(t, exitFailure, code, "the cloud could not say: not a refusal")
	require.Contains(t, errOut, "the cloud at "+tc.url+" could not check the credential: token: cloud answered 503 unavailable: database unavailable")

	before := tc.requests.Load()
	code, out, errOut = check(tc.url, "h_1", "wrong-s3cret", "--offline")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "credential not checked with the cloud (--offline)")
	require.Equal(t, before, tc.requests.Load(), "--offline contacts no cloud")

	var stderr bytes.Buffer
	code = run(context.Background(), []string{"run", "--offline", "--config", cfg}, io.Discard, &stderr, noEnv)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "--offline goes with --check")
}

// TestRunCheckExecPrograms: `run --check` shows each exec program where it
// will run from — a relative one (with a "/") against the configuration
// file's directory, made absolute, however the file was named — and exits
// 2, naming the key and the program, for one that does not exist or is not
// executable.
func TestRunCheckExecPrograms(t *testing.T) {
	// Not parallel: it changes the working directory.
	top := t.TempDir()
	conf := filepath.Join(top, "conf")
	for _, p := range []string{"conf/x.sh", "conf/sub/y.sh", "z.sh"} {
		require.NoError(t, os.MkdirAll(filepath.Join(top, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(top, p), []byte("#!/bin/sh\n"), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(conf, "plain.sh"), []byte("#!/bin/sh\n"), 0o644))
	state := claimedState(t, "https://relay.example.com")

	for _, tc := range []struct {
		name, program, wd, config string
		code                      int
		want                      string
	}{
		{"dot slash, config relative", "./x.sh", conf, "relay-host.json", exitOK, "exec " + filepath.Join(conf, "x.sh") + " --flag"},
		{"dot slash, config relative from above", "./x.sh", top, "conf/relay-host.json", exitOK, "exec " + filepath.Join(conf, "x.sh") + " --flag"},
		{"dot slash, config absolute", "./x.sh", top, filepath.Join(conf, "relay-host.json"), exitOK, "exec " + filepath.Join(conf, "x.sh") + " --flag"},
		{"subdirectory", "sub/y.sh", conf, "relay-host.json", exitOK, "exec " + filepath.Join(conf, "sub", "y.sh") + " --flag"},
		{"parent", "../z.sh", conf, "relay-host.json", exitOK, "exec " + filepath.Join(top, "z.sh") + " --flag"},
		{"absolute", filepath.Join(top, "z.sh"), conf, "relay-host.json", exitOK, "exec " + filepath.Join(top, "z.sh") + " --flag"},
		{"bare name in $PATH", "sh", conf, "relay-host.json", exitOK, "exec sh --flag"},
		{"bare name not in $PATH", "x.sh", conf, "relay-host.json", exitUsage,
			`webhooks.deploy.exec: "x.sh": not found in $PATH`},
		{"missing", "./on-deploy.sh", conf, "relay-host.json", exitUsage,
			`webhooks.deploy.exec: "./on-deploy.sh" (` + filepath.Join(conf, "on-deploy.sh") + `): no such file`},
		{"not executable", "./plain.sh", conf, "relay-host.json", exitUsage,
			`webhooks.deploy.exec: "./plain.sh" (` + filepath.Join(conf, "plain.sh") + `): is not executable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, conf, "relay-host.json", `{"webhooks": {"deploy": {"enabled": true, "exec": ["`+tc.program+`", "--flag"]}}}`)
			t.Chdir(tc.wd)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"run", "--check", "--offline", "--config", tc.config, "--state", state}, &stdout, &stderr, noEnv)
			require.Equal(t, tc.code, code, stderr.String())
			if tc.code == exitOK {
				require.Contains(t, stdout.String(), "* → "+tc.want+" (timeout 10m0s)")
				return
			}
			require.Empty(t, stdout.String())
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

// TestRunCheckComparesSources: once the cloud accepts the credential, `run
// --check` compares the configuration's sources with the cloud's and
// prints each difference as a warning on stderr — a source name the cloud
// does not have with the nearest one it has — and still exits 0. A cloud
// that cannot say (one that predates the call) is a warning too; --offline
// says it compared nothing.
func TestRunCheckComparesSources(t *testing.T) {
	t.Parallel()
	tc := startTokenCloud(t, shared.HostSource{Name: "github", Provider: "github", Enabled: true, Events: []string{}})
	old := startTokenCloud(t)
	dir := t.TempDir()
	typo := writeFile(t, dir, "typo.json", `{"webhooks": {"githb": {"enabled": true, "forward": "http://127.0.0.1:3000/gh"}}}`)
	good := writeFile(t, dir, "good.json", `{"webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:3000/gh"}}}`)
	check := func(cloudURL, cfg string, extra ...string) (int, string, string) {
		t.Helper()
		state := claimedState(t, cloudURL)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"run", "--check", "--config", cfg, "--state", state}, extra...), &stdout, &stderr, noEnv)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := check(tc.url, typo)
	require.Equal(t, exitOK, code, "a warning, not an error: %s", errOut)
	require.Contains(t, out, "credential accepted by the cloud")
	require.Contains(t, out, "sources: 2 differ from the cloud's (the warnings on stderr)")
	require.Contains(t, errOut, `host run --check: warning: webhooks.githb: the cloud has no source "githb" for this host, so this handler never runs; `+
		`did you mean "github"? Rename webhooks.githb to webhooks.github`)
	require.Contains(t, errOut, `host run --check: warning: the cloud's source "github" is enabled, and the host's configuration has no webhooks.github: `+
		`its webhooks are still stored and handed to this host, which skips them`)
	require.NotContains(t, out+errOut, "s3cret")

	code, out, errOut = check(tc.url, good)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "sources match the cloud's (1)")
	require.Empty(t, errOut)

	code, out, errOut = check(old.url, typo)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "sources not compared with the cloud's (see the warning)")
	require.Contains(t, errOut, "host run --check: warning: the sources were not compared with the cloud's: the cloud does not list a host's sources (it predates GET /api/hosts/sources)")

	before := tc.requests.Load()
	code, out, errOut = check(tc.url, typo, "--offline")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "sources not compared with the cloud's (--offline)")
	require.Empty(t, errOut)
	require.Equal(t, before, tc.requests.Load(), "--offline contacts no cloud")
}
