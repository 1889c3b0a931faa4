package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// The console in a real browser against the real cloud binary: log in,
// create and claim a host, add and configure a source, see the host come
// online, log out. Every page is screenshotted.

// consoleLogin logs the browser in to c's console with the admin token
// and leaves it on the hosts page.
func consoleLogin(t *testing.T, ctx context.Context, c *cloud) {
	t.Helper()
	do(t, ctx, "log in",
		chromedp.Navigate(c.url+"/console/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.CSS(`.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("host-name")),
	)
}

// text is an element's visible text.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(get(t, ctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// submitAndWait clicks a button (or link) and waits for the next page to
// show waitFor: the page is marked before the click, so that waitFor on
// the page being left does not count.
func submitAndWait(t *testing.T, ctx context.Context, what, button, waitFor string) {
	t.Helper()
	do(t, ctx, what,
		chromedp.Evaluate[chromedp.Void](`document.documentElement.dataset.left = "1"`),
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitReady(chromedp.CSS(`html:not([data-left])`)),
		chromedp.WaitVisible(chromedp.CSS(waitFor)))
}

func TestConsole(t *testing.T) {
	eachEngineParallel(t, testConsole)
}

func testConsole(t *testing.T, dbURL string) {
	// Presence is recorded (with its history) by the alert evaluator.
	c := startCloud(t, dbURL, "RELAY_ALERT_INTERVAL=1s", "RELAY_HOST_LATE_AFTER=5s", "RELAY_HOST_OFFLINE_AFTER=8s")
	ctx := newBrowser(t)

	// A wrong token is refused, on the login page.
	do(t, ctx, "wrong token",
		chromedp.Navigate(c.url+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token"),
		chromedp.Click(chromedp.CSS(`.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(".login .flash.error")),
	)
	require.Contains(t, text(t, ctx, ".login .flash.error"), "wrong admin token")
	screenshot(t, ctx, "login-refused")

	consoleLogin(t, ctx, c)
	require.Contains(t, text(t, ctx, "main"), "No hosts yet")
	screenshot(t, ctx, "hosts-empty")

	// Create a host: its claim code is shown once.
	do(t, ctx, "name the host", chromedp.SendKeys(chromedp.ID("host-name"), "office"))
	submitAndWait(t, ctx, "create the host", `form[action="/console/hosts"] button`, "#claim-code")
	code := text(t, ctx, "#claim-code")
	require.Regexp(t, `^[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}$`, code)
	screenshot(t, ctx, "claim-code")
	submitAndWait(t, ctx, "go to the host", `a[href^="/console/hosts/h_"]`, "#sources")
	loc := get(t, ctx, "location", chromedp.Location())
	hostID := loc[strings.LastIndex(loc, "/")+1:]
	require.True(t, strings.HasPrefix(hostID, "h_"), loc)

	// Add a source.
	do(t, ctx, "fill the source form",
		chromedp.SendKeys(chromedp.ID("src-name"), "github"),
		chromedp.SendKeys(chromedp.ID("src-secret"), "first-secret"),
		chromedp.SendKeys(chromedp.ID("src-events"), "push, pull_request"),
	)
	submitAndWait(t, ctx, "add the source", `form[action$="/sources"] button`, "#source-github")
	require.Equal(t, "Source saved.", text(t, ctx, ".flash"))
	wantURL := c.url + "/api/webhooks/" + hostID + "/github"
	require.Equal(t, wantURL, get(t, ctx, "webhook URL", chromedp.Value(chromedp.ID("url-github"))))
	// The script ran under the CSP: it showed the copy button.
	do(t, ctx, "copy button shown", chromedp.WaitVisible(chromedp.CSS(`button.copy[data-copy="url-github"]`)))
	src := func() shared.Source {
		t.Helper()
		var s shared.Source
		require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID+"/sources/github", nil, &s))
		return s
	}
	require.Equal(t, []string{"push", "pull_request"}, src().Events)
	firstFP := src().SecretFingerprints

	// Disable, then enable again.
	submitAndWait(t, ctx, "disable", `#source-github form[action$="/enabled"] button`, "#source-github .tag.off")
	require.False(t, src().Enabled)
	submitAndWait(t, ctx, "enable", `#source-github form[action$="/enabled"] button`, "#source-github .tag.on")
	require.True(t, src().Enabled)

	// The event filter.
	do(t, ctx, "type the filter", chromedp.SetValue(chromedp.ID("events-github"), "push"))
	submitAndWait(t, ctx, "save the filter", `#source-github form[action$="/events"] button`, "#source-github")
	require.Equal(t, "Event filter saved.", text(t, ctx, ".flash"))
	require.Equal(t, []string{"push"}, src().Events)

	// Rotate the secret: the page shows the new fingerprint, and webhooks
	// signed with the new secret are taken, the old one's refused.
	do(t, ctx, "type the new secret", chromedp.SendKeys(chromedp.ID("secret-github"), "rotated-secret"))
	submitAndWait(t, ctx, "rotate", `#source-github form[action$="/secret"] button`, "#source-github")
	require.Contains(t, text(t, ctx, ".flash"), "Secret rotated")
	fps := src().SecretFingerprints
	require.Len(t, fps, 1)
	require.NotEqual(t, firstFP, fps)
	require.Contains(t, text(t, ctx, "#source-github"), fps[0])
	body := []byte(`{"ref":"refs/heads/main","commits":[]}`)
	status, _, err := signGitHub("first-secret", "push", "d-old", body).send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 401, status, "the old secret is gone")
	status, _, err = signGitHub("rotated-secret", "push", "d-new", body).send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 200, status, "taken")

	// Rate limit.
	do(t, ctx, "type the limits",
		chromedp.SetValue(chromedp.ID("rate"), "30"),
		chromedp.SetValue(chromedp.ID("burst"), "5"))
	submitAndWait(t, ctx, "save the limits", `#limits button`, "#limits")
	require.Equal(t, "Rate limits saved.", text(t, ctx, ".flash"))
	var h struct {
		RateLimitPerMin int `json:"rate_limit_per_min"`
		RateLimitBurst  int `json:"rate_limit_burst"`
	}
	require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID, nil, &h))
	require.Equal(t, 30, h.RateLimitPerMin)
	require.Equal(t, 5, h.RateLimitBurst)

	// Claim the host with the code the console gave, and see it online.
	rc := startReceiver(t)
	hostProc := claimAndStartHost(t, c.url, code, rc.url)
	eventually(t, 30*time.Second, "the host shows online", func() bool {
		do(t, ctx, "reload", chromedp.Navigate(c.url+"/console/hosts/"+hostID), chromedp.WaitVisible(chromedp.CSS("#sources")))
		return text(t, ctx, ".summary .presence") == "online"
	})
	eventually(t, 30*time.Second, "the webhook forwarded", func() bool { return rc.count() == 1 })
	eventually(t, 30*time.Second, "the presence history shown", func() bool {
		do(t, ctx, "reload", chromedp.Navigate(c.url+"/console/hosts/"+hostID), chromedp.WaitVisible(chromedp.CSS("#presence")))
		return strings.Contains(text(t, ctx, "#presence"), "online")
	})
	screenshot(t, ctx, "host")
	do(t, ctx, "hosts", chromedp.Navigate(c.url+"/console/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-host="`+hostID+`"]`)))
	require.Equal(t, "online", text(t, ctx, `tr[data-host="`+hostID+`"] .presence`))
	screenshot(t, ctx, "hosts")

	// The host stops with a webhook waiting: it shows offline with its
	// backlog, and the alert fires in the banner.
	hostProc.kill()
	// (A body of its own: the same body under a new id would be held by
	// the source's replay guard, on as the console creates it.)
	status, _, err = signGitHub("rotated-secret", "push", "d-waiting", []byte(`{"ref":"refs/heads/waiting"}`)).send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	eventually(t, 60*time.Second, "the offline alert in the banner", func() bool {
		do(t, ctx, "reload", chromedp.Navigate(c.url+"/console/"), chromedp.WaitVisible(chromedp.ID("host-name")))
		banner := get(t, ctx, "banner", chromedp.Evaluate[string](`(document.querySelector(".alert-banner") || {}).textContent || ""`))
		return strings.Contains(banner, "alert")
	})
	row := `tr[data-host="` + hostID + `"]`
	require.Equal(t, "offline", text(t, ctx, row+" .presence"))
	require.Equal(t, "1", text(t, ctx, row+" td:nth-child(4)"), "pending")
	screenshot(t, ctx, "hosts-offline")

	// A new claim code, on its own page.
	do(t, ctx, "host page", chromedp.Navigate(c.url+"/console/hosts/"+hostID), chromedp.WaitVisible(chromedp.CSS("#claim")))
	submitAndWait(t, ctx, "new claim code", "#claim button", "#claim-code")
	require.NotEqual(t, code, text(t, ctx, "#claim-code"))
	screenshot(t, ctx, "new-claim-code")

	// Deactivate another host, behind its confirmation page.
	spare, _ := c.newHost("spare", "spare-secret")
	do(t, ctx, "spare host", chromedp.Navigate(c.url+"/console/hosts/"+spare), chromedp.WaitVisible(chromedp.CSS("#deactivate")))
	submitAndWait(t, ctx, "ask to deactivate", "#deactivate a.button", `form[action$="/deactivate"]`)
	screenshot(t, ctx, "deactivate")
	submitAndWait(t, ctx, "confirm", `form[action$="/deactivate"] button`, ".flash")
	require.Contains(t, text(t, ctx, ".flash"), "Host deactivated")
	var sh struct {
		Status string `json:"status"`
	}
	require.Equal(t, 200, c.admin("GET", "/api/hosts/"+spare, nil, &sh))
	require.Equal(t, "deactivated", sh.Status)

	// A form whose CSRF token is taken out is refused, and creates nothing.
	hostsNow := func() int {
		var out struct {
			Hosts []json.RawMessage `json:"hosts"`
		}
		require.Equal(t, 200, c.admin("GET", "/api/hosts", nil, &out))
		return len(out.Hosts)
	}
	n := hostsNow()
	do(t, ctx, "hosts page", chromedp.Navigate(c.url+"/console/"), chromedp.WaitVisible(chromedp.ID("host-name")),
		chromedp.SendKeys(chromedp.ID("host-name"), "forged"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('form[action="/console/hosts"] input[name="csrf"]').remove()`))
	submitAndWait(t, ctx, "submit without the token", `form[action="/console/hosts"] button`, ".error-page")
	require.Equal(t, "Refused", text(t, ctx, ".error-page h1"))
	require.Contains(t, text(t, ctx, ".error-page"), "security token is missing")
	require.Equal(t, n, hostsNow(), "nothing created")

	// The stylesheet applies under the CSP (nothing inline is needed).
	bg := get(t, ctx, "header colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("header.top")).backgroundColor`))
	require.Equal(t, "rgb(22, 32, 44)", bg)

	do(t, ctx, "alerts", chromedp.Navigate(c.url+"/console/alerts"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	require.Equal(t, "Alerts", text(t, ctx, "main h1"))
	require.Contains(t, text(t, ctx, "table.alerts tr.firing"), "host_offline_with_work")
	screenshot(t, ctx, "alerts")

	// Log out: a page then leads to the login page.
	submitAndWait(t, ctx, "log out", "form.logout button", "#token")
	require.Equal(t, "You are logged out.", text(t, ctx, ".flash"))
	do(t, ctx, "a page after logout", chromedp.Navigate(c.url+"/console/hosts/"+hostID), chromedp.WaitVisible(chromedp.ID("token")))
	require.Contains(t, get(t, ctx, "location", chromedp.Location()), "/console/login?next=")
	screenshot(t, ctx, "login")
}
