package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/config"
)

// TestCheckCloud: the one rule of where the host's secrets may go, as
// claim (no claimed cloud yet), run and reconcile apply it.
func TestCheckCloud(t *testing.T) {
	t.Parallel()
	const claimedHTTPS, claimedHTTP = "https://relay.example.com", "http://192.0.2.1:8080"
	none, insecure, other, both := cloudConsent{}, cloudConsent{insecureHTTP: true}, cloudConsent{otherCloud: true},
		cloudConsent{insecureHTTP: true, otherCloud: true}
	for _, tc := range []struct {
		name, target, claimed string
		consent               cloudConsent
		err                   string   // "" accepted
		warnings              []string // each a part of one warning, in order
	}{
		{"claim, https", "https://relay.example.com", "", none, "", nil},
		{"claim, loopback http", "http://127.0.0.1:8080", "", none, "", nil},
		{"claim, localhost http", "http://LOCALHOST:8080", "", none, "", nil},
		{"claim, [::1] http", "http://[::1]:8080", "", none, "", nil},
		{"claim, plain http to another machine", "http://relay.example.com", "", none,
			"--cloud http://relay.example.com: plain http to another machine sends the claim code, the host's credential and every webhook in clear; use https, or --insecure-http to accept that", nil},
		{"claim, a name that resolves to loopback is not loopback", "http://127.0.0.1.nip.io", "", none, "plain http to another machine", nil},
		{"claim, plain http accepted", "http://192.0.2.1:8080", "", insecure, "",
			[]string{"--insecure-http: the claim code, the host's credential and every webhook travel to http://192.0.2.1:8080 in clear"}},
		{"not a URL", "relay.example.com", "", none, `--cloud: invalid URL "relay.example.com": scheme must be http or https`, nil},

		{"the claimed cloud", claimedHTTPS, claimedHTTPS, none, "", nil},
		{"the claimed cloud, spelt otherwise", "HTTPS://Relay.Example.com:443/", claimedHTTPS, none, "", nil},
		{"another cloud", "https://relay2.example.com", claimedHTTPS, none,
			"--cloud https://relay2.example.com is not the cloud this host was claimed from (https://relay.example.com, in credentials.json): the host's credential would go to it; claim the host from that cloud, or give --other-cloud to send it there", nil},
		{"another port is another cloud", "https://relay.example.com:8443", claimedHTTPS, none, "is not the cloud this host was claimed from", nil},
		{"another path is another cloud", "https://relay.example.com/relay", claimedHTTPS, none, "is not the cloud this host was claimed from", nil},
		{"https is not the claimed plain http", "https://192.0.2.1:8080", claimedHTTP, none, "is not the cloud this host was claimed from", nil},
		{"a loopback cloud is another cloud too", "http://127.0.0.1:9000", "http://127.0.0.1:8080", none, "is not the cloud this host was claimed from", nil},
		{"another cloud accepted", "https://relay2.example.com", claimedHTTPS, other, "",
			[]string{"--other-cloud: the host's credential goes to https://relay2.example.com, not to https://relay.example.com it was claimed from"}},
		{"the claimed plain http cloud", claimedHTTP, claimedHTTP, none, "",
			[]string{"the host's credential, its tokens and every webhook travel to http://192.0.2.1:8080 in clear (plain http, accepted with --insecure-http when the host was claimed)"}},
		{"plain http to another machine, another cloud", "http://relay.example.com", claimedHTTPS, other,
			"--cloud http://relay.example.com: plain http to another machine sends the host's credential, its tokens and every webhook in clear", nil},
		{"plain http to another machine needs both", "http://relay.example.com", claimedHTTPS, insecure, "is not the cloud this host was claimed from", nil},
		{"plain http to another machine with both", "http://relay.example.com", claimedHTTPS, both, "",
			[]string{"--insecure-http: the host's credential, its tokens and every webhook travel to http://relay.example.com in clear",
				"--other-cloud: the host's credential goes to http://relay.example.com"}},
		{"no password echoed", "http://u:pw@192.0.2.7", "https://u:pw@relay.example.com", none, "http://u:xxxxx@192.0.2.7", nil},
		{"no password echoed, other cloud", "https://u:pw@relay2.example.com", "https://u:pw@relay.example.com", none, "(https://u:xxxxx@relay.example.com, in credentials.json)", nil},
	} {
		warnings, err := checkCloud("--cloud", tc.target, tc.claimed, tc.consent)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			require.NotContains(t, err.Error(), "pw@", tc.name)
			require.Nil(t, warnings, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Len(t, warnings, len(tc.warnings), "%s: %q", tc.name, warnings)
		for i, w := range tc.warnings {
			require.Contains(t, warnings[i], w, tc.name)
		}
	}
}

// recordingCloud is a listener on loopback that counts the requests it
// gets and refuses them all, as a cloud refuses a credential it does not
// know.
func recordingCloud(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error": {"code": "unauthorized", "message": "unknown host or wrong credential"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestReconcileSendsTheCredentialOnlyWhereAllowed: `host reconcile
// --cloud` is refused, before anything is sent, for plain http to another
// machine (unless --insecure-http) and for a cloud other than the claimed
// one (unless --other-cloud, which warns).
func TestReconcileSendsTheCredentialOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	claimed, claimedHits := recordingCloud(t)
	state := claimedState(t, claimed.URL)
	seedLedger(t, state)
	reconcile := func(ctx context.Context, args ...string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--state", state}, args...), io.Discard, &stderr, noEnv)
		return code, stderr.String()
	}
	// A context already canceled: had the command got as far as the
	// network, it would end there, before a connection to anything.
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	code, errOut := reconcile(canceled, "--cloud", "http://192.0.2.1:8080")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "host reconcile: --cloud http://192.0.2.1:8080: plain http to another machine sends the host's credential")
	require.Contains(t, errOut, "--insecure-http to accept that")
	code, errOut = reconcile(canceled, "--cloud", "http://192.0.2.1:8080", "--insecure-http")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "is not the cloud this host was claimed from ("+claimed.URL+", in credentials.json)")

	other, otherHits := recordingCloud(t)
	code, errOut = reconcile(context.Background(), "--cloud", other.URL)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "host reconcile: --cloud "+other.URL+" is not the cloud this host was claimed from")
	require.Contains(t, errOut, "--other-cloud")
	require.Zero(t, otherHits.Load(), "nothing sent to the other cloud")

	code, errOut = reconcile(context.Background(), "--cloud", other.URL, "--other-cloud")
	require.Equal(t, exitRevoked, code, errOut)
	require.Contains(t, errOut, "host reconcile: warning: --other-cloud: the host's credential goes to "+other.URL+", not to "+claimed.URL)
	require.Equal(t, int32(1), otherHits.Load(), "sent where --other-cloud said")

	// The claimed cloud, named or not, needs nothing more.
	require.Zero(t, claimedHits.Load())
	for _, args := range [][]string{nil, {"--cloud", claimed.URL + "/"}} {
		code, errOut = reconcile(context.Background(), args...)
		require.Equal(t, exitRevoked, code, errOut)
		require.NotContains(t, errOut, "warning")
	}
	require.Equal(t, int32(2), claimedHits.Load())
	require.Equal(t, int32(1), otherHits.Load())

	// A host claimed over plain http (with --insecure-http) reconciles with
	// that cloud, and is told each time what that means.
	plain := claimedState(t, "http://192.0.2.1:8080")
	seedLedger(t, plain)
	var stderr bytes.Buffer
	code = run(canceled, []string{"reconcile", "--state", plain}, io.Discard, &stderr, noEnv)
	require.NotEqual(t, exitUsage, code, stderr.String())
	require.Contains(t, stderr.String(), "host reconcile: warning: the host's credential, its tokens and every webhook travel to http://192.0.2.1:8080 in clear")
}

// TestRunSendsTheCredentialOnlyWhereAllowed: `host run`, given a cloud_url
// in its configuration, applies the rule reconcile and claim do: plain http
// to another machine is refused unless it is the claimed cloud (then a
// warning says it) or --insecure-http, another cloud unless --other-cloud.
func TestRunSendsTheCredentialOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	check := func(claimed, configured string, extra ...string) (int, string) {
		t.Helper()
		dir := t.TempDir()
		state := filepath.Join(dir, "state")
		require.NoError(t, config.WriteCredentials(state, config.Credentials{CloudURL: claimed, HostID: "h_1", HostCredential: "cred"}))
		cfgJSON := `{"webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:3000/gh"}}}`
		if configured != "" {
			cfgJSON = `{"cloud_url": "` + configured + `", "webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:3000/gh"}}}`
		}
		cfg := writeFile(t, dir, "host.json", cfgJSON)
		var stderr bytes.Buffer
		args := append([]string{"run", "--check", "--offline", "--config", cfg, "--state", state}, extra...)
		code := run(context.Background(), args, io.Discard, &stderr, noEnv)
		return code, stderr.String()
	}

	code, errOut := check("https://relay.example.com", "http://relay.example.com")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "host run: config cloud_url http://relay.example.com: plain http to another machine")
	code, errOut = check("https://relay.example.com", "http://u:pw@192.0.2.1:8080", "--other-cloud")
	require.Equal(t, exitUsage, code)
	require.NotContains(t, errOut, "pw@", "the URL's password is not echoed")
	code, errOut = check("https://relay.example.com", "http://192.0.2.1:8080", "--insecure-http", "--other-cloud")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "host run --check: warning: --insecure-http:")
	require.Contains(t, errOut, "host run --check: warning: --other-cloud:")

	// The cloud the claim accepted over plain http: accepted, said.
	for _, configured := range []string{"", "http://192.0.2.1:8080", "http://192.0.2.1:8080/"} {
		code, errOut = check("http://192.0.2.1:8080", configured)
		require.Equal(t, exitOK, code, "the URL the claim accepted: %s", errOut)
		require.Contains(t, errOut, "host run --check: warning: the host's credential, its tokens and every webhook travel to http://192.0.2.1:8080 in clear")
	}
	code, errOut = check("http://192.0.2.1:8080", "http://192.0.2.1:8081")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "plain http to another machine")

	// Another cloud, https or on this machine: refused unless --other-cloud.
	for _, configured := range []string{"https://relay2.example.com", "http://127.0.0.1:8080"} {
		code, errOut = check("https://relay.example.com", configured)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "host run: config cloud_url "+configured+" is not the cloud this host was claimed from (https://relay.example.com, in credentials.json)")
		code, errOut = check("https://relay.example.com", configured, "--other-cloud")
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, errOut, "host run --check: warning: --other-cloud: the host's credential goes to "+configured)
	}
	code, errOut = check("https://relay.example.com", "https://relay.example.com")
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
}

// TestRunRefusesAPublicLocalAPI: the local API, which has no
// authentication, listens beyond loopback only when --listen-public says
// so, and a warning says what that means; the address may come from
// $RELAY_HOST_LISTEN as well.
func TestRunRefusesAPublicLocalAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := claimedState(t, "http://127.0.0.1:1") // nobody listens there
	cfg := writeFile(t, dir, "host.json", `{"webhooks": {}}`)
	check := func(getenv func(string) string, extra ...string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		code := run(context.Background(), append([]string{"run", "--check", "--offline", "--config", cfg, "--state", state}, extra...),
			io.Discard, &stderr, getenv)
		return code, stderr.String()
	}
	for _, addr := range []string{"0.0.0.0:7071", ":7071", "[::]:7071", "192.0.2.1:7071", "relay-host.lan:7071"} {
		code, errOut := check(noEnv, "--listen", addr)
		require.Equal(t, exitUsage, code, addr)
		require.Contains(t, errOut, "host run: local API address "+addr+" (--listen, else $RELAY_HOST_LISTEN) is not loopback", addr)
		require.Contains(t, errOut, "--listen-public", addr)

		code, errOut = check(noEnv, "--listen", addr, "--listen-public")
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, errOut, "host run --check: warning: --listen-public: the local API answers, without authentication, anyone who can reach "+addr)
	}
	env := func(k string) string {
		if k == config.EnvListen {
			return "0.0.0.0:7071"
		}
		return ""
	}
	code, errOut := check(env)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "local API address 0.0.0.0:7071")
	for _, addr := range []string{"127.0.0.1:7071", "localhost:7071", "[::1]:0", "127.0.0.2:7071"} {
		code, errOut = check(noEnv, "--listen", addr)
		require.Equal(t, exitOK, code, errOut)
		require.Empty(t, errOut, addr)
	}
	code, errOut = check(noEnv, "--listen", "7071")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `local API address "7071"`)

	// host run itself refuses before it listens or opens the ledger (a
	// context canceled: it would stop at once had it started).
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	code = run(canceled, []string{"run", "--config", cfg, "--state", state, "--listen", "0.0.0.0:0"}, io.Discard, &stderr, noEnv)
	require.Equal(t, exitUsage, code, stderr.String())
	require.True(t, strings.HasPrefix(stderr.String(), "host run: local API address 0.0.0.0:0"), stderr.String())
	require.NoFileExists(t, filepath.Join(state, ledgerFile))
}
