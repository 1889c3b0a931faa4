package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
)

// authBundle is a server whose log is kept, driven in-process so that each
// request can come from its own client address.
type authBundle struct {
	t       *testing.T
	handler http.Handler
	clock   *clockwork.FakeClock
	log     *bytes.Buffer
}

func authSetup(t *testing.T) *authBundle {
	t.Helper()
	st := sqlitetest.Open(t)
	clock := newClock()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := testServer(t, st, clock, log, Config{AdminToken: testAdmin})
	return &authBundle{t: t, handler: s.Handler(), clock: clock, log: &buf}
}

// from sends a request as the client at ip.
func (b *authBundle) from(ip, method, path string, body io.Reader, headers map[string]string) answer {
	b.t.Helper()
	req := httptest.NewRequest(method, path, body)
	req.RemoteAddr = net.JoinHostPort(ip, "40000")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (b *authBundle) claim(ip, code string) answer {
	return b.from(ip, "POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: code}), nil)
}

func (b *authBundle) admin(ip, token, method, path string, in any) answer {
	var body io.Reader
	if in != nil {
		body = jsonBody(in)
	}
	return b.from(ip, method, path, body, map[string]string{"Authorization": "Bearer " + token})
}

func (b *authBundle) newHost(name string) shared.CreateHostResponse {
	b.t.Helper()
	a := b.admin("192.0.2.1", testAdmin, "POST", "/api/hosts", map[string]string{"name": name})
	require.Equal(b.t, 201, a.status, string(a.body))
	var h shared.CreateHostResponse
	a.json(b.t, &h)
	return h
}

// TestAuthFailuresThrottled: ten wrong claim codes from one address are
// answered 401, the eleventh 429 with Retry-After — and so is the right code
// from that address, until a token has refilled. Another address is not
// affected, and successful calls take nothing from a bucket.
func TestAuthFailuresThrottled(t *testing.T) {
	b := authSetup(t)
	h := b.newHost("victim")
	const attacker, other = "203.0.113.7", "198.51.100.9"

	for i := 0; i < 10; i++ {
		a := b.claim(attacker, fmt.Sprintf("WRNG-CODE-%04d-XXXX", i))
		require.Equal(t, 401, a.status, "attempt %d", i+1)
	}
	a := b.claim(attacker, "WRNG-CODE-9999-XXXX")
	require.Equal(t, 429, a.status)
	require.Equal(t, shared.CodeRateLimited, a.errCode(t))
	require.Equal(t, "6", a.header.Get("Retry-After"), "10 a minute: one every 6 s")
	a = b.claim(attacker, h.ClaimCode)
	require.Equal(t, 429, a.status, "an address over its limit is not heard, right code or not")

	// Another address: its own bucket.
	require.Equal(t, 401, b.claim(other, "WRNG-CODE-0000-XXXX").status)
	a = b.claim(other, h.ClaimCode)
	require.Equal(t, 200, a.status, string(a.body))
	var claimed shared.ClaimResponse
	a.json(t, &claimed)

	// One token refills in 6 s: one more try, then 429 again.
	b.clock.Advance(6 * time.Second)
	require.Equal(t, 401, b.claim(attacker, "WRNG-CODE-0001-XXXX").status)
	require.Equal(t, 429, b.claim(attacker, "WRNG-CODE-0002-XXXX").status)

	// The token endpoint counts wrong credentials; right ones take nothing.
	const host = "192.0.2.44"
	token := func(cred string) int {
		return b.from(host, "POST", "/api/hosts/token",
			jsonBody(shared.TokenRequest{HostID: claimed.HostID, HostCredential: cred}), nil).status
	}
	for i := 0; i < 50; i++ {
		require.Equal(t, 200, token(claimed.HostCredential), "success %d is not slowed", i+1)
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, 401, token("wrong-credential"), "failure %d", i+1)
	}
	require.Equal(t, 429, token("wrong-credential"))
	require.Equal(t, 429, token(claimed.HostCredential))
	// An unknown host id is a failure too.
	unknown := func() int {
		return b.from("192.0.2.45", "POST", "/api/hosts/token",
			jsonBody(shared.TokenRequest{HostID: "h_nope", HostCredential: "x"}), nil).status
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, 401, unknown())
	}
	require.Equal(t, 429, unknown())
}

// TestAdminLoginFailuresThrottled: the admin API counts wrong and missing
// tokens per address; the right token from another address still works,
// and many successful calls never reach the limit.
func TestAdminLoginFailuresThrottled(t *testing.T) {
	b := authSetup(t)
	const admin, attacker = "192.0.2.1", "203.0.113.7"
	for i := 0; i < 30; i++ {
		require.Equal(t, 200, b.admin(admin, testAdmin, "GET", "/api/hosts", nil).status)
	}
	for i := 0; i < 10; i++ {
		token := fmt.Sprintf("guess-%d", i)
		if i%2 == 1 {
			token = "" // no token at all counts too
		}
		require.Equal(t, 401, b.admin(attacker, token, "GET", "/metrics", nil).status, "guess %d", i+1)
	}
	a := b.admin(attacker, "guess-x", "GET", "/api/hosts", nil)
	require.Equal(t, 429, a.status)
	require.NotEmpty(t, a.header.Get("Retry-After"))
	require.Equal(t, 429, b.admin(attacker, testAdmin, "GET", "/api/hosts", nil).status)
	require.Equal(t, 200, b.admin(admin, testAdmin, "GET", "/api/hosts", nil).status)

	// An IPv6 client is counted by its /64: moving within it does not help.
	for i := 0; i < 10; i++ {
		require.Equal(t, 401, b.admin(fmt.Sprintf("2001:db8:1:2::%x", i+1), "guess", "GET", "/api/hosts", nil).status)
	}
	require.Equal(t, 429, b.admin("2001:db8:1:2:ffff::1", "guess", "GET", "/api/hosts", nil).status)
	require.Equal(t, 401, b.admin("2001:db8:1:3::1", "guess", "GET", "/api/hosts", nil).status)
}

// TestAuthFailuresLogged: each failure is logged, at most 10 lines a minute
// in all whatever the flood; the next line says how many went unlogged.
func TestAuthFailuresLogged(t *testing.T) {
	b := authSetup(t)
	for i := 0; i < 200; i++ {
		b.claim(fmt.Sprintf("203.0.113.%d", i), "WRNG-CODE-0000-XXXX")
	}
	lines := strings.Count(b.log.String(), "authentication failed")
	require.Equal(t, authLogPerMin, lines, b.log.String())
	require.Contains(t, b.log.String(), "client=203.0.113.0")
	require.Contains(t, b.log.String(), "reason=\"claim code unknown, already used or expired\"")

	b.clock.Advance(time.Minute)
	b.log.Reset()
	b.claim("203.0.113.250", "WRNG-CODE-0000-XXXX")
	require.Contains(t, b.log.String(), "unlogged_before=190")
}
