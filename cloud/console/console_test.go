package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testAdmin = "admin-token-for-console-tests"

type bundle struct {
	t     *testing.T
	srv   *httptest.Server
	store store.Store
	clock *clockwork.FakeClock
	con   *Console
	app   *server.Server
}

type options struct {
	secureCookie   bool
	trustedProxies []string
	volume         func(ctx context.Context, now time.Time, hostIDs []string) (map[string][]int, error)
	maxSessions    int
}

func setup(t *testing.T, opts ...options) *bundle {
	t.Helper()
	var o options
	if len(opts) > 0 {
		o = opts[0]
	}
	st := sqlitetest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	return serve(t, st, clock, testAdmin, o)
}

// serve runs a cloud's API and console over st with the admin token: a
// replica, or the cloud restarted with another token, when st is shared.
func serve(t *testing.T, st store.Store, clock *clockwork.FakeClock, adminToken string, o options) *bundle {
	t.Helper()
	ring, err := secrets.NewRing(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	tokens, err := auth.NewTokens([]byte("jwt-key-for-tests-32-bytes-long!"), 0, clock)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := server.New(st, ring, tokens, clock, log, server.Config{AdminToken: adminToken, TrustedProxies: o.trustedProxies})
	con := New(Deps{App: app, Store: st, Clock: clock, Log: log, CSRFKey: tokens.DerivedKey("console csrf"),
		SecureCookie: o.secureCookie, Volume: o.volume, MaxSessions: o.maxSessions})
	app.Mount(Path+"/", con.Routes, con.NotFound)
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(srv.Close)
	return &bundle{t: t, srv: srv, store: st, clock: clock, con: con, app: app}
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   string
}

// client is a browser-like client of the console: it keeps its cookie and
// does not follow redirects.
type client struct {
	b      *bundle
	cookie *http.Cookie
}

func (b *bundle) client() *client { return &client{b: b} }

// loggedIn is a client with a session.
func (b *bundle) loggedIn() *client {
	b.t.Helper()
	cl := b.client()
	cl.login()
	return cl
}

func (cl *client) do(method, path string, form url.Values, headers map[string]string) answer {
	t := cl.b.t
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, cl.b.srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cl.cookie != nil {
		req.AddCookie(cl.cookie)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, ck := range resp.Cookies() {
		if ck.Name == CookieName {
			if ck.MaxAge < 0 {
				cl.cookie = nil
			} else {
				cl.cookie = ck
			}
		}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(rb)}
}

func (cl *client) get(path string) answer {
	cl.b.t.Helper()
	return cl.do("GET", path, nil, nil)
}

// post sends a form with the page's CSRF token (as a browser would, from
// a page of the console).
func (cl *client) post(path string, form url.Values) answer {
	cl.b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form[CSRFField]; !ok {
		form.Set(CSRFField, cl.csrf())
	}
	return cl.do("POST", path, form, map[string]string{"Origin": cl.b.srv.URL, "Sec-Fetch-Site": "same-origin"})
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token the hosts page's forms carry.
func (cl *client) csrf() string {
	cl.b.t.Helper()
	a := cl.get("/console/")
	require.Equal(cl.b.t, 200, a.status, a.body)
	m := csrfRE.FindStringSubmatch(a.body)
	require.NotNil(cl.b.t, m, "no CSRF field on the hosts page")
	return m[1]
}

// login logs the client in with the admin token.
func (cl *client) login() {
	t := cl.b.t
	t.Helper()
	a := cl.do("POST", "/console/login", url.Values{"token": {testAdmin}, "next": {"/console/"}}, nil)
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, "/console/", a.header.Get("Location"))
	require.NotNil(t, cl.cookie, "a session cookie")
}

func TestRootRedirectsToConsole(t *testing.T) {
	b := setup(t)
	a := b.client().get("/")
	require.Equal(t, 303, a.status)
	require.Equal(t, "/console/", a.header.Get("Location"))
	require.Equal(t, CSP, a.header.Get("Content-Security-Policy"))
}

// A console path that names no page is answered by a page, with the
// console's headers; other unknown paths keep the API's JSON error.
func TestUnknownPage(t *testing.T) {
	b := setup(t)
	cl := b.client()
	a := cl.get("/console/no/such/page")
	require.Equal(t, 404, a.status)
	require.Contains(t, a.header.Get("Content-Type"), "text/html")
	require.Equal(t, CSP, a.header.Get("Content-Security-Policy"))
	require.Contains(t, a.body, "There is no such page.")
	cl.login()
	a = cl.get("/console/hosts/x/nothing")
	require.Equal(t, 404, a.status)
	require.Contains(t, a.body, "There is no such page.")
	require.Contains(t, a.body, `href="/console/"`, "a way back")
	a = cl.get("/api/no-such-endpoint")
	require.Equal(t, 404, a.status)
	require.Contains(t, a.header.Get("Content-Type"), "application/json")
}

func TestLogin(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cl := b.client()

	a := cl.get("/console/hosts/h_x")
	require.Equal(t, 303, a.status, "no session: to the login page")
	require.Equal(t, "/console/login?next=%2Fconsole%2Fhosts%2Fh_x", a.header.Get("Location"))
	a = cl.get("/console/login?next=%2Fconsole%2Fhosts%2Fh_x")
	require.Equal(t, 200, a.status)
	require.Contains(t, a.body, `name="next" value="/console/hosts/h_x"`)

	a = cl.do("POST", "/console/login", url.Values{"token": {"wrong"}}, nil)
	require.Equal(t, 401, a.status)
	require.Contains(t, a.body, "wrong admin token")
	require.Nil(t, cl.cookie)

	a = cl.do("POST", "/console/login", url.Values{"token": {testAdmin}, "next": {"/console/hosts/h_x"}}, nil)
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, "/console/hosts/h_x", a.header.Get("Location"), "back where it was going")
	ck := cl.cookie
	require.NotNil(t, ck)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, "/console", ck.Path)
	require.False(t, ck.Secure, "plain HTTP: not Secure")
	setCookie := a.header.Get("Set-Cookie")
	require.Contains(t, setCookie, "HttpOnly")
	require.Contains(t, setCookie, "SameSite=Strict")

	// Only the id's hash, keyed by the admin token, is stored.
	id, err := base64.RawURLEncoding.DecodeString(ck.Value)
	require.NoError(t, err)
	require.Len(t, id, 32)
	keyed := b.con.sessionHash(id)
	s, err := b.store.SessionGet(ctx, keyed)
	require.NoError(t, err)
	require.Equal(t, b.clock.Now().Add(SessionMaxAge), s.ExpiresAt)
	_, err = b.store.SessionGet(ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound)
	sum := sha256.Sum256(id)
	_, err = b.store.SessionGet(ctx, sum[:])
	require.ErrorIs(t, err, store.ErrNotFound, "not the id's plain SHA-256")

	require.Equal(t, 200, cl.get("/console/").status)
	a = cl.get("/console/login")
	require.Equal(t, 303, a.status, "logged in already")

	// Logging in again replaces the session: a new id, the old one gone.
	cl.login()
	require.NotEqual(t, ck.Value, cl.cookie.Value)
	_, err = b.store.SessionGet(ctx, keyed)
	require.ErrorIs(t, err, store.ErrNotFound)
	n, err := b.store.SessionCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Another site is never a next stop.
	for _, next := range []string{"https://evil.example/", "//evil.example/console/", "/console/\\evil", "/api/hosts"} {
		require.Equal(t, "/console/", nextPath(next), next)
	}
}

func TestLoginSecureCookie(t *testing.T) {
	b := setup(t, options{secureCookie: true})
	cl := b.loggedIn()
	require.True(t, cl.cookie.Secure)
}

// Behind a proxy that terminates TLS, the session cookie is Secure when a
// trusted proxy says the request came over HTTPS, and only then: anyone
// else's X-Forwarded-Proto is not believed.
func TestLoginSecureCookieBehindTrustedProxy(t *testing.T) {
	login := func(b *bundle, proto string) *http.Cookie {
		t.Helper()
		cl := b.client()
		h := map[string]string{}
		if proto != "" {
			h["X-Forwarded-Proto"] = proto
		}
		a := cl.do("POST", "/console/login", url.Values{"token": {testAdmin}, "next": {"/console/"}}, h)
		require.Equal(t, 303, a.status, a.body)
		require.NotNil(t, cl.cookie)
		return cl.cookie
	}
	trusted := setup(t, options{trustedProxies: []string{"127.0.0.0/8"}})
	require.True(t, login(trusted, "https").Secure, "a trusted proxy says https")
	require.True(t, login(trusted, "HTTPS, http").Secure, "the first proxy's word")
	require.False(t, login(trusted, "http").Secure)
	require.False(t, login(trusted, "").Secure)
	untrusted := setup(t, options{trustedProxies: []string{"10.0.0.0/8"}})
	require.False(t, login(untrusted, "https").Secure, "not from a trusted proxy")
}

func TestLoginThrottleSharedWithAPI(t *testing.T) {
	b := setup(t)
	cl := b.client()
	for i := range 10 { // the default RELAY_AUTH_FAILURES_PER_MIN
		a := cl.do("POST", "/console/login", url.Values{"token": {"wrong"}}, nil)
		require.Equal(t, 401, a.status, "attempt %d", i)
	}
	a := cl.do("POST", "/console/login", url.Values{"token": {testAdmin}}, nil)
	require.Equal(t, 429, a.status, "throttled, even with the right token")
	require.NotEmpty(t, a.header.Get("Retry-After"))
	require.Nil(t, cl.cookie)

	// The same bucket as the admin API's.
	req, _ := http.NewRequest("GET", b.srv.URL+"/api/hosts", nil)
	req.Header.Set("Authorization", "Bearer "+testAdmin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 429, resp.StatusCode)

	b.clock.Advance(6 * time.Second) // a token back at 10 a minute
	cl.login()
}

func TestSessionExpiry(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		b := setup(t)
		cl := b.loggedIn()
		b.clock.Advance(SessionIdle - time.Minute)
		require.Equal(t, 200, cl.get("/console/").status, "used within 12 h: it lives on")
		b.clock.Advance(SessionIdle - time.Minute)
		require.Equal(t, 200, cl.get("/console/").status, "counted from its last use")
		b.clock.Advance(SessionIdle)
		a := cl.get("/console/")
		require.Equal(t, 303, a.status, "idle 12 h: ended")
		require.True(t, strings.HasPrefix(a.header.Get("Location"), "/console/login"))
		n, err := b.store.SessionCount(context.Background())
		require.NoError(t, err)
		require.Zero(t, n, "an ended session is deleted when seen")
	})
	t.Run("absolute", func(t *testing.T) {
		b := setup(t)
		cl := b.loggedIn()
		for used := time.Duration(0); used < SessionMaxAge-11*time.Hour; used += 11 * time.Hour {
			b.clock.Advance(11 * time.Hour)
			require.Equal(t, 200, cl.get("/console/").status, "at %v", used)
		}
		b.clock.Advance(11 * time.Hour)
		require.Equal(t, 303, cl.get("/console/").status, "7 days after login it ends, used or not")
	})
	t.Run("touch is throttled", func(t *testing.T) {
		b := setup(t)
		cl := b.loggedIn()
		id, _ := base64.RawURLEncoding.DecodeString(cl.cookie.Value)
		b.clock.Advance(30 * time.Second)
		cl.get("/console/")
		s, err := b.store.SessionGet(context.Background(), b.con.sessionHash(id))
		require.NoError(t, err)
		require.Equal(t, b.clock.Now().Add(-30*time.Second), s.LastSeenAt, "not written within a minute")
		b.clock.Advance(time.Minute)
		cl.get("/console/")
		s, err = b.store.SessionGet(context.Background(), b.con.sessionHash(id))
		require.NoError(t, err)
		require.Equal(t, b.clock.Now(), s.LastSeenAt)
	})
}

func TestSessionBound(t *testing.T) {
	// The bound is the console's setting (1,000 by default, each session
	// a durable write): a small one shows the same.
	const bound = 20
	b := setup(t, options{maxSessions: bound})
	ctx := context.Background()
	cl := b.loggedIn() // the oldest
	for range bound + 4 {
		b.clock.Advance(time.Millisecond)
		_, _, err := b.con.StartSession(ctx)
		require.NoError(t, err)
	}
	n, err := b.store.SessionCount(ctx)
	require.NoError(t, err)
	require.Equal(t, bound, n)
	require.Equal(t, 303, cl.get("/console/").status, "the oldest session was removed")
}

func TestLogout(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	old := cl.cookie
	a := cl.post("/console/logout", nil)
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, "/console/login?m=logged-out", a.header.Get("Location"))
	require.Nil(t, cl.cookie, "the cookie is cleared")
	require.Contains(t, cl.get("/console/login?m=logged-out").body, "You are logged out.")
	n, err := b.store.SessionCount(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "the session is deleted")
	cl.cookie = old
	require.Equal(t, 303, cl.get("/console/").status, "the old cookie opens nothing")
}

func TestCSRF(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cl := b.loggedIn()
	token := cl.csrf()
	created, err := b.app.CreateHost(ctx, "h")
	require.NoError(t, err)
	hostID := created.ID
	_, _, err = b.app.PutSource(ctx, hostID, "github", &server.SourceRequest{Secrets: []string{"s3cret"}})
	require.NoError(t, err)
	other := b.client()
	other.login()
	otherToken := other.csrf()
	require.NotEqual(t, token, otherToken, "a token per session")
	before := snapshot(t, b, hostID)

	routes := map[string]url.Values{
		"/console/hosts": {"name": {"new"}},
		"/console/hosts/" + hostID + "/claim-code":                 {},
		"/console/hosts/" + hostID + "/limits":                     {"rate_limit_per_min": {"5"}},
		"/console/hosts/" + hostID + "/deactivate":                 {"confirm": {"yes"}},
		"/console/hosts/" + hostID + "/sources":                    {"name": {"stripe"}, "secret": {"whsec_x"}},
		"/console/hosts/" + hostID + "/sources/github/enabled":     {"enabled": {"false"}},
		"/console/hosts/" + hostID + "/sources/github/events":      {"events": {"push"}},
		"/console/hosts/" + hostID + "/sources/github/allowed-ips": {"allowed_ips": {"192.0.2.1"}},
		"/console/hosts/" + hostID + "/sources/github/secret":      {"secret": {"new"}},
		"/console/logout": {},
	}
	same := map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}
	cases := []struct {
		name    string
		token   *string
		headers map[string]string
	}{
		{"missing token", nil, same},
		{"wrong token", ptr("AAAA" + token[4:]), same},
		{"another session's token", &otherToken, same},
		{"cross-site Origin", &token, map[string]string{"Origin": "https://evil.example"}},
		{"null Origin", &token, map[string]string{"Origin": "null"}},
		{"cross-site fetch", &token, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site fetch", &token, map[string]string{"Sec-Fetch-Site": "same-site"}},
	}
	for _, tc := range cases {
		for path, form := range routes {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if tc.token != nil {
				f.Set(CSRFField, *tc.token)
			}
			a := cl.do("POST", path, f, tc.headers)
			require.Equal(t, 403, a.status, "%s: %s", tc.name, path)
			require.Contains(t, a.body, "<h1>Refused</h1>", "a readable page")
			require.Equal(t, CSP, a.header.Get("Content-Security-Policy"))
		}
	}
	require.Equal(t, before, snapshot(t, b, hostID), "nothing changed")
	require.Equal(t, 200, cl.get("/console/").status, "still logged in")

	// Login refuses another site too (its form has no session yet).
	a := b.client().do("POST", "/console/login", url.Values{"token": {testAdmin}}, map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, 403, a.status)
	require.Empty(t, a.header.Get("Set-Cookie"))
}

func ptr[T any](v T) *T { return &v }

// snapshot is what the console's forms can change, for comparison.
func snapshot(t *testing.T, b *bundle, hostID string) string {
	t.Helper()
	ctx := context.Background()
	hosts, err := b.store.HostList(ctx)
	require.NoError(t, err)
	srcs, err := b.store.SourceList(ctx, hostID)
	require.NoError(t, err)
	n, err := b.store.SessionCount(ctx)
	require.NoError(t, err)
	var sb strings.Builder
	for _, h := range hosts {
		sb.WriteString(h.ID + h.Name + string(h.Status) + string(h.ClaimCodeHash))
		sb.WriteString(strings.Repeat("|", h.RateLimitPerMin) + "\n")
	}
	for _, s := range srcs {
		sb.WriteString(s.Name + strings.Join(s.Events, ",") + string(rune('0'+len(s.Secrets))) + s.Secrets[0].Fingerprint)
		if s.Enabled {
			sb.WriteString(" on")
		}
		sb.WriteString("\n")
	}
	sb.WriteString(strings.Repeat("s", n))
	return sb.String()
}

// TestFormBound: a form's body is read up to 64 KiB; more is refused with
// a page, before its token is looked at.
func TestFormBound(t *testing.T) {
	b := setup(t)
	big := url.Values{"token": {strings.Repeat("a", maxFormBytes)}}
	a := b.client().do("POST", "/console/login", big, nil)
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "at most 64 KiB")

	cl := b.loggedIn()
	a = cl.post("/console/hosts", url.Values{"name": {strings.Repeat("n", maxFormBytes)}})
	require.Equal(t, 400, a.status)
	hosts, err := b.store.HostList(context.Background())
	require.NoError(t, err)
	require.Empty(t, hosts)
}
