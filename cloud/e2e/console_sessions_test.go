package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleSessionsEndWithToken: a console session lives only as long
// as the admin token it was opened under. On the real cloud binary, over
// HTTP with the session cookie: restarted with a new RELAY_ADMIN_TOKEN the
// old cookie is sent to the login page and can create nothing; restarted
// without a token no session is valid and none opens; the token set again
// brings back no session; and `cloud ctl sessions end-all` ends a live
// session without rotating.
func TestConsoleSessionsEndWithToken(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL)
		const rotated = "e2e-rotated-admin-token-of-at-least-32-chars"
		restartWith := func(token string) {
			t.Helper()
			c.env = append(c.env, "RELAY_ADMIN_TOKEN="+token) // the last one counts
			c.restart()
		}

		first := consoleHTTPLogin(t, c, adminToken)
		require.Equal(t, 200, first.get("/console/").status)
		csrf := first.csrf()

		// Rotated: the old cookie opens nothing, changes nothing.
		restartWith(rotated)
		first.requireLoginPage("/console/", "after rotating the token")
		a := first.form("/console/hosts", url.Values{"name": {"after rotation"}, "csrf": {csrf}})
		require.Equal(t, 303, a.status, "no host created, no claim code shown: %s", a.body)
		require.True(t, strings.HasPrefix(a.location, "/console/login"), a.location)
		require.Zero(t, hostCount(t, c, rotated), "nothing was created with the old cookie")
		require.Equal(t, 401, c.admin("GET", "/api/hosts", nil, nil), "the old token opens the API no more")
		a = first.get("/console/login")
		require.Equal(t, 200, a.status, "the login page itself, not 'logged in already'")

		// A login with the new token works.
		second := consoleHTTPLogin(t, c, rotated)
		require.Equal(t, 200, second.get("/console/").status)

		// No token: no session, and no login.
		restartWith("")
		second.requireLoginPage("/console/", "with no token")
		a = second.form("/console/login", url.Values{"token": {rotated}})
		require.Equal(t, 501, a.status, a.body)

		// The token set again: the sessions ended for good.
		restartWith(rotated)
		second.requireLoginPage("/console/", "the token set again")

		// Ending every session without rotating.
		third := consoleHTTPLogin(t, c, rotated)
		require.Equal(t, 200, third.get("/console/").status)
		r := ctl(t, c.url, "", []string{"RELAY_ADMIN_TOKEN=" + rotated}, "sessions", "end-all")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		require.Equal(t, "ended 1 console sessions\n", r.stdout)
		third.requireLoginPage("/console/", "after sessions end-all")
		r = ctl(t, c.url, "", []string{"RELAY_ADMIN_TOKEN=" + rotated}, "sessions", "end-all", "--json")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		require.JSONEq(t, `{"ended":0}`, r.stdout)
		r = ctl(t, c.url, "", nil, "sessions", "end-all")
		require.Equal(t, 4, r.code, "the old token is refused: %s", r.stderr)
	})
}

// consoleClient is a browser's part that matters here: the console's
// session cookie, redirects not followed.
type consoleClient struct {
	t      *testing.T
	c      *cloud
	cookie *http.Cookie
}

type consoleAnswer struct {
	status   int
	location string
	body     string
}

func (cc *consoleClient) do(method, path string, form url.Values, headers map[string]string) consoleAnswer {
	cc.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, cc.c.url+path, body)
	require.NoError(cc.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if cc.cookie != nil {
		req.AddCookie(cc.cookie)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(cc.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(cc.t, err)
	for _, ck := range resp.Cookies() {
		if ck.Name == "relay_session" && ck.MaxAge >= 0 {
			cc.cookie = ck
		}
	}
	return consoleAnswer{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b)}
}

func (cc *consoleClient) get(path string) consoleAnswer {
	cc.t.Helper()
	return cc.do("GET", path, nil, nil)
}

// form posts a form as the console's own pages do (same origin).
func (cc *consoleClient) form(path string, form url.Values) consoleAnswer {
	cc.t.Helper()
	return cc.do("POST", path, form, map[string]string{"Origin": cc.c.url, "Sec-Fetch-Site": "same-origin"})
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token the hosts page's forms carry.
func (cc *consoleClient) csrf() string {
	cc.t.Helper()
	a := cc.get("/console/")
	require.Equal(cc.t, 200, a.status, a.body)
	m := consoleCSRF.FindStringSubmatch(a.body)
	require.NotNil(cc.t, m, "no CSRF field on the hosts page")
	return m[1]
}

// requireLoginPage: the cookie opens nothing at path; the browser is sent
// to the login page, which it gets.
func (cc *consoleClient) requireLoginPage(path, when string) {
	cc.t.Helper()
	a := cc.get(path)
	require.Equal(cc.t, 303, a.status, "%s: %s", when, a.body)
	require.Equal(cc.t, "/console/login?next="+url.QueryEscape(path), a.location, when)
	a = cc.get(a.location)
	require.Equal(cc.t, 200, a.status, when)
	require.Contains(cc.t, a.body, `name="token"`, "%s: the login form", when)
}

// consoleHTTPLogin logs in to c's console with token over HTTP and
// returns the client holding the session cookie.
func consoleHTTPLogin(t *testing.T, c *cloud, token string) *consoleClient {
	t.Helper()
	cc := &consoleClient{t: t, c: c}
	a := cc.form("/console/login", url.Values{"token": {token}, "next": {"/console/"}})
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, "/console/", a.location)
	require.NotNil(t, cc.cookie, "a session cookie")
	return cc
}

// hostCount is how many hosts the admin API lists, asked with token.
func hostCount(t *testing.T, c *cloud, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", c.url+"/api/hosts", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var out struct {
		Hosts []struct{} `json:"hosts"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return len(out.Hosts)
}
