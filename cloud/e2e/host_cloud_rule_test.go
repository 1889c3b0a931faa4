package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxyTrap is a listener on loopback named as every proxy of a command's
// environment: a request the command sends to a machine other than this
// one reaches the trap instead (Go's clients use $HTTP_PROXY for any host
// but a loopback one), which counts the connection and closes it. So a
// test can tell, without any traffic leaving loopback, whether a command
// tried to reach such a machine.
type proxyTrap struct {
	url   string
	conns atomic.Int32
}

func newProxyTrap(t *testing.T) *proxyTrap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxyTrap{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return p
}

// env is the environment of a command whose every proxy is the trap.
func (p *proxyTrap) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HTTP_PROXY="+p.url, "http_proxy="+p.url, "HTTPS_PROXY="+p.url, "https_proxy="+p.url), extra...)
}

// TestHostReconcileSendsTheCredentialOnlyToItsCloud runs `host reconcile
// --cloud` against a claimed host: plain http to another machine is
// refused (exit 2) before anything is dialed, unless --insecure-http; a
// cloud other than the claimed one, here a listener on loopback, gets
// nothing unless --other-cloud, which says where the credential goes; the
// claimed cloud needs neither.
func TestHostReconcileSendsTheCredentialOnlyToItsCloud(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "reconcile-rule")
	state := s.claimInto(t)
	// reconcile reads the ledger `host run` makes: run the host once.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "relay-host.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+s.cloud.url+`", "webhooks": {}}`), 0o600))
	startHostIn(t, dir, state, "--config", cfg).kill()

	trap := newProxyTrap(t)
	reconcile := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "host"), append([]string{"reconcile", "--state", state, "--since", "1h"}, args...)...)
		cmd.Env = trap.env()
		return runExit(t, cmd)
	}

	// Plain http to another machine: refused, nothing dialed.
	const far = "http://192.0.2.1:8080" // TEST-NET-1: never reached, the trap takes any attempt
	code, out := reconcile("--cloud", far)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "host reconcile: --cloud "+far+": plain http to another machine sends the host's credential, its tokens and every webhook in clear; use https, or --insecure-http to accept that")
	require.Zero(t, trap.conns.Load(), "nothing dialed")
	// --insecure-http accepts the plain http, not the other cloud.
	code, out = reconcile("--cloud", far, "--insecure-http")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "host reconcile: --cloud "+far+" is not the cloud this host was claimed from ("+s.cloud.url+", in credentials.json)")
	require.Zero(t, trap.conns.Load(), "nothing dialed")
	// With both, the command goes there (to the trap): the trap sees what
	// a refusal would have sent.
	code, out = reconcile("--cloud", far, "--insecure-http", "--other-cloud")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "host reconcile: warning: --insecure-http: the host's credential, its tokens and every webhook travel to "+far+" in clear")
	require.Contains(t, out, "host reconcile: warning: --other-cloud: the host's credential goes to "+far+", not to "+s.cloud.url+" it was claimed from")
	require.Positive(t, trap.conns.Load(), "the trap takes what goes beyond loopback")

	// Another cloud on this machine: refused unless --other-cloud.
	var mu sync.Mutex
	var got []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error": {"code": "unauthorized", "message": "unknown host or wrong credential"}}`)
	}))
	t.Cleanup(other.Close)
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	code, out = reconcile("--cloud", other.URL)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "host reconcile: --cloud "+other.URL+" is not the cloud this host was claimed from ("+s.cloud.url+", in credentials.json): "+
		"the host's credential would go to it; claim the host from that cloud, or give --other-cloud to send it there")
	require.Empty(t, received(), "the other cloud got nothing")
	code, out = reconcile("--cloud", other.URL, "--other-cloud")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "host reconcile: warning: --other-cloud: the host's credential goes to "+other.URL+", not to "+s.cloud.url+" it was claimed from")
	require.Len(t, received(), 1)
	require.Contains(t, received()[0], "/api/hosts/token ")
	require.Contains(t, received()[0], `"host_credential"`, "sent where --other-cloud said")

	// The claimed cloud, named or not: no flag, no warning.
	for _, args := range [][]string{nil, {"--cloud", s.cloud.url + "/"}} {
		code, out = reconcile(args...)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "the ledger and the cloud agree")
		require.NotContains(t, out, "warning")
	}
	require.Len(t, received(), 1)
}
