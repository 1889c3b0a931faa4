package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const otherAdmin = "another-admin-token-for-console-tests"

// sentToLogin requires an answer sending the browser to the login page.
func sentToLogin(t *testing.T, a answer, what string) {
	t.Helper()
	require.Equal(t, 303, a.status, "%s: %s", what, a.body)
	require.True(t, strings.HasPrefix(a.header.Get("Location"), Path+"/login"), "%s: to %q", what, a.header.Get("Location"))
}

// hostCount is how many hosts are stored.
func (b *bundle) hostCount() int {
	b.t.Helper()
	hosts, err := b.store.HostList(context.Background())
	require.NoError(b.t, err)
	return len(hosts)
}

// A session lives only under the admin token it was opened with: the
// cloud restarted with another token, or with none, finds no session for
// the cookie (nothing can be read or changed with it), on every replica.
func TestSessionEndsWithAdminToken(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cl := b.loggedIn()
	require.Equal(t, 200, cl.get("/console/").status)
	csrf := cl.csrf()
	form := func() url.Values { return url.Values{"name": {"minted"}, CSRFField: {csrf}} }
	fromConsole := func(b *bundle) map[string]string {
		return map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}
	}

	// The cloud restarted with a rotated token (a replica with it: the
	// same database).
	rotated := serve(t, b.store, b.clock, otherAdmin, options{})
	old := &client{b: rotated, cookie: cl.cookie}
	sentToLogin(t, old.get("/console/"), "rotated: a page")
	sentToLogin(t, old.get("/console/hosts/h_x"), "rotated: a host's page")
	sentToLogin(t, old.do("POST", "/console/hosts", form(), fromConsole(rotated)), "rotated: creating a host")
	require.Zero(t, b.hostCount(), "no host, no claim code minted")
	a := old.get("/console/login")
	require.Equal(t, 200, a.status, "the login page, not 'logged in already'")
	require.Contains(t, a.body, `name="token"`)

	// The token removed: "the admin API refuses every request", the
	// console too, and logging in is refused.
	none := serve(t, b.store, b.clock, "", options{})
	old = &client{b: none, cookie: cl.cookie}
	sentToLogin(t, old.get("/console/"), "no token: a page")
	sentToLogin(t, old.do("POST", "/console/hosts", form(), fromConsole(none)), "no token: creating a host")
	require.Zero(t, b.hostCount())
	require.Equal(t, 200, old.get("/console/login").status)
	a = old.do("POST", "/console/login", url.Values{"token": {testAdmin}}, nil)
	require.Equal(t, http.StatusNotImplemented, a.status, a.body)
	require.Contains(t, a.body, "set RELAY_ADMIN_TOKEN")
	a = old.do("POST", "/console/login", url.Values{"token": {""}}, nil)
	require.Equal(t, http.StatusNotImplemented, a.status, "an empty token opens nothing either")
	_, _, err := none.con.StartSession(ctx)
	require.ErrorIs(t, err, errNoAdminToken)
	n, err := b.store.SessionCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "no session was stored without a token")

	// Under the new token one logs in with the new token; that session is
	// unknown to a replica still holding the old one.
	fresh := rotated.client()
	a = fresh.do("POST", "/console/login", url.Values{"token": {testAdmin}}, nil)
	require.Equal(t, 401, a.status, "the old token no longer logs in")
	a = fresh.do("POST", "/console/login", url.Values{"token": {otherAdmin}, "next": {"/console/"}}, nil)
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, "/console/", a.header.Get("Location"))
	require.Equal(t, 200, fresh.get("/console/").status)
	require.Equal(t, 201, fresh.post("/console/hosts", url.Values{"name": {"new"}}).status)
	require.Equal(t, 1, b.hostCount())
	sentToLogin(t, (&client{b: b, cookie: fresh.cookie}).get("/console/"), "the new session under the old token")
	sentToLogin(t, (&client{b: none, cookie: fresh.cookie}).get("/console/"), "the new session with no token")
}

// Ending every session (DELETE /api/console/sessions, `cloud ctl sessions
// end-all`) sends every browser to the login page without a new token;
// logging in again works.
func TestEndAllSessions(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	one, two := b.client(), b.client()
	one.login()
	two.login()
	replica := serve(t, b.store, b.clock, testAdmin, options{})
	onReplica := &client{b: replica, cookie: two.cookie}
	require.Equal(t, 200, one.get("/console/").status)
	require.Equal(t, 200, onReplica.get("/console/").status, "a replica with the same token knows the session")

	req, err := http.NewRequest("DELETE", b.srv.URL+"/api/console/sessions", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAdmin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var out struct {
		Ended int `json:"ended"`
	}
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, 2, out.Ended)

	sentToLogin(t, one.get("/console/"), "ended")
	sentToLogin(t, two.get("/console/"), "ended")
	sentToLogin(t, onReplica.get("/console/"), "ended, on the replica too")
	n, err := b.store.SessionCount(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	one.login()
	require.Equal(t, 200, one.get("/console/").status, "a new login is a new session")
}
