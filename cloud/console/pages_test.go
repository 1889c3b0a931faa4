package console

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
)

// inlineRE finds what the CSP would block: code inside a script element,
// style elements and attributes, event handler attributes and javascript:
// URLs. (Script elements without src are checked by checkPage.)
var inlineRE = regexp.MustCompile(`(?i)<script[^>]*>\s*[^<\s]|<style[\s>]|\sstyle\s*=|\son[a-z]+\s*=|javascript:`)

// scriptTagRE finds script elements: each must load the console's script.
var scriptTagRE = regexp.MustCompile(`(?i)<script[^>]*>`)

func checkPage(t *testing.T, what string, a answer) {
	t.Helper()
	require.Equal(t, CSP, a.header.Get("Content-Security-Policy"), what)
	require.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"), what)
	require.Equal(t, "same-origin", a.header.Get("Referrer-Policy"), what)
	require.Equal(t, "no-store", a.header.Get("Cache-Control"), what)
	require.Equal(t, "text/html; charset=utf-8", a.header.Get("Content-Type"), what)
	require.NotRegexp(t, inlineRE, a.body, "%s: inline script or style", what)
	for _, tag := range scriptTagRE.FindAllString(a.body, -1) {
		require.Regexp(t, `src="/console/assets/console\.js\?v=[0-9a-f]{16}"`, tag, "%s: only the console's own script", what)
	}
	require.Contains(t, a.body, `<link rel="stylesheet" href="/console/assets/console.css?v=`, what)
}

func TestInlineDetector(t *testing.T) {
	for _, bad := range []string{`<script>alert(1)</script>`, `<p style="color:red">`, `<style>p{}</style>`,
		`<a href="javascript:x()">`, `<img src=x onerror="x()">`, `<script type="module">x()</script>`} {
		require.Regexp(t, inlineRE, bad)
	}
	for _, good := range []string{`<script src="/console/assets/console.js?v=1" defer></script>`, `<p class="style">`, `<td>onward</td>`} {
		require.NotRegexp(t, inlineRE, good)
	}
}

// TestEveryPage renders every page the console has, each in the states
// it has (empty, full, refused form, error), and checks each for the
// security headers and for anything inline.
func TestEveryPage(t *testing.T) {
	var b *bundle
	vol := func(ctx context.Context, now time.Time, _ []string) (map[string][]int, error) {
		hosts, err := b.store.HostList(ctx)
		out := map[string][]int{}
		for _, h := range hosts {
			out[h.ID] = []int{0, 3, 9, 4, 0, 1, 12, 7, 0, 0, 2, 5, 8, 1, 0, 0, 0, 3, 4, 5, 6, 7, 8, 2}
		}
		return out, err
	}
	b = setup(t, options{volume: vol})
	ctx := context.Background()
	cl := b.client()
	checkPage(t, "login", cl.get("/console/login"))
	checkPage(t, "login refused", cl.do("POST", "/console/login", url.Values{"token": {"no"}}, nil))
	cl.login()
	checkPage(t, "hosts, none", cl.get("/console/"))
	checkPage(t, "alerts, none", cl.get("/console/alerts"))
	checkPage(t, "groups, none", cl.get("/console/groups"))

	a := cl.post("/console/hosts", url.Values{"name": {"office <b>server</b>"}})
	require.Equal(t, 201, a.status, a.body)
	checkPage(t, "claim code", a)
	require.Contains(t, a.body, "office &lt;b&gt;server&lt;/b&gt;", "names are text")
	hosts, err := b.store.HostList(ctx)
	require.NoError(t, err)
	hostID := hosts[0].ID
	require.Regexp(t, `class="secret-once">[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}<`, a.body)

	_, _, err = b.app.PutSource(ctx, hostID, "github", &server.SourceRequest{Secrets: []string{"s3cret"}, Events: []string{"push"}})
	require.NoError(t, err)
	_, err = b.store.AlertFire(ctx, []*store.AlertFireParams{{Rule: "host_offline", Key: "host:" + hostID, HostID: hostID,
		Summary: "office <i>server</i> is offline", Now: b.clock.Now(),
		Payload: func(*store.Alert) ([]byte, error) { return []byte("{}"), nil }}})
	require.NoError(t, err)

	a = cl.get("/console/")
	checkPage(t, "hosts", a)
	require.Contains(t, a.body, `<svg class="spark"`)
	require.Contains(t, a.body, "1 alert firing")
	require.Contains(t, a.body, "office &lt;i&gt;server&lt;/i&gt; is offline")
	a = cl.get("/console/hosts/" + hostID)
	checkPage(t, "host", a)
	require.Contains(t, a.body, "/api/webhooks/"+hostID+"/github")
	checkPage(t, "alerts", cl.get("/console/alerts"))
	_, err = b.store.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_every", Name: "every <b>page</b>", Now: b.clock.Now()})
	require.NoError(t, err)
	_, err = b.store.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_every", HostID: hostID, Now: b.clock.Now()})
	require.NoError(t, err)
	checkPage(t, "groups", cl.get("/console/groups"))
	checkPage(t, "group", cl.get("/console/groups/g_every"))
	checkPage(t, "host in a group", cl.get("/console/hosts/"+hostID))
	checkPage(t, "deactivate", cl.get("/console/hosts/"+hostID+"/deactivate"))
	a = cl.post("/console/hosts/"+hostID+"/sources/github/events", url.Values{"events": {"<bad>"}})
	require.Equal(t, 400, a.status)
	checkPage(t, "host, refused form", a)
	a = cl.get("/console/hosts/h_none")
	require.Equal(t, 404, a.status)
	checkPage(t, "not found", a)
	a = cl.post("/console/hosts", url.Values{"name": {" "}})
	require.Equal(t, 400, a.status)
	checkPage(t, "error", a)
	a = cl.post("/console/hosts/"+hostID+"/claim-code", nil)
	require.Equal(t, 200, a.status)
	checkPage(t, "new claim code", a)
	a = cl.do("POST", "/console/hosts", url.Values{"name": {"x"}}, nil)
	require.Equal(t, 403, a.status)
	checkPage(t, "refused", a)
}

func TestAssets(t *testing.T) {
	b := setup(t)
	cl := b.client()
	for name, ctype := range map[string]string{"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"} {
		u := assetURL(name)
		a := cl.get(u)
		require.Equal(t, 200, a.status)
		require.Equal(t, ctype, a.header.Get("Content-Type"))
		require.Equal(t, "public, max-age=31536000, immutable", a.header.Get("Cache-Control"), "by its hashed URL")
		require.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"))
		etag := a.header.Get("ETag")
		require.Equal(t, `"`+assets()[name].hash+`"`, etag)
		a = cl.do("GET", "/console/assets/"+name, nil, map[string]string{"If-None-Match": etag})
		require.Equal(t, 304, a.status)
		require.Equal(t, "no-cache", a.header.Get("Cache-Control"), "unhashed: revalidated")
		a = cl.get("/console/assets/" + name + "?v=old")
		require.Equal(t, "no-cache", a.header.Get("Cache-Control"))
	}
	require.LessOrEqual(t, len(assets()["console.js"].body), 4<<10, "a few KB of JavaScript at most")
	require.Equal(t, 404, cl.get("/console/assets/nope.js").status)
}

// TestHostForms changes a host and its sources through the console's
// forms and reads the result from the store.
func TestHostForms(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cl := b.loggedIn()
	a := cl.post("/console/hosts", url.Values{"name": {"office"}})
	require.Equal(t, 201, a.status, a.body)
	hosts, err := b.store.HostList(ctx)
	require.NoError(t, err)
	hostID := hosts[0].ID
	base := "/console/hosts/" + hostID

	redirect := func(a answer, msg string) {
		t.Helper()
		require.Equal(t, 303, a.status, a.body)
		require.True(t, strings.HasPrefix(a.header.Get("Location"), base+"?m="+msg), a.header.Get("Location"))
	}
	source := func() *store.Source {
		t.Helper()
		s, err := b.store.SourceGet(ctx, hostID, "github")
		require.NoError(t, err)
		return s
	}

	// Add a source; adding it again is refused, not a replacement.
	redirect(cl.post(base+"/sources", url.Values{"name": {"github"}, "secret": {"first-secret"}, "events": {"push, pull_request"}}), "source-saved")
	src := source()
	require.True(t, src.Enabled)
	require.Equal(t, []string{"push", "pull_request"}, src.Events)
	require.Len(t, src.Secrets, 1)
	first := src.Secrets[0].Fingerprint
	a = cl.post(base+"/sources", url.Values{"name": {"github"}, "secret": {"other"}})
	require.Equal(t, 409, a.status)
	require.Equal(t, first, source().Secrets[0].Fingerprint)
	a = cl.post(base+"/sources", url.Values{"name": {"Bad Name"}, "secret": {"x"}})
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "source name must be")
	require.Contains(t, a.body, `value="Bad Name"`, "the form keeps what was typed")
	a = cl.post(base+"/sources", url.Values{"name": {"nope"}, "secret": {"x"}})
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "unknown provider")

	// Enable and disable.
	redirect(cl.post(base+"/sources/github/enabled", url.Values{"enabled": {"false"}}), "source-disabled")
	require.False(t, source().Enabled)
	require.Contains(t, cl.get(base).body, `<span class="tag off">disabled</span>`)
	redirect(cl.post(base+"/sources/github/enabled", url.Values{"enabled": {"true"}}), "source-enabled")
	require.True(t, source().Enabled)

	// The event filter; empty is every event. A bad name changes nothing.
	redirect(cl.post(base+"/sources/github/events", url.Values{"events": {"push\nissues"}}), "events-saved")
	require.Equal(t, []string{"push", "issues"}, source().Events)
	a = cl.post(base+"/sources/github/events", url.Values{"events": {"push, <x>"}})
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "invalid event name")
	require.Equal(t, []string{"push", "issues"}, source().Events)
	redirect(cl.post(base+"/sources/github/events", url.Values{"events": {""}}), "events-saved")
	require.Empty(t, source().Events)

	// The allowed addresses, typed as the filter is; a bad entry is
	// named and changes nothing; empty is any address.
	redirect(cl.post(base+"/sources/github/allowed-ips", url.Values{"allowed_ips": {"203.0.113.0/24,\nstripe 198.51.100.7"}}), "ips-saved")
	require.Equal(t, []string{"203.0.113.0/24", "stripe", "198.51.100.7/32"}, source().AllowedIPs)
	require.Contains(t, cl.get(base).body, `value="203.0.113.0/24, stripe, 198.51.100.7/32"`)
	a = cl.post(base+"/sources/github/allowed-ips", url.Values{"allowed_ips": {"203.0.113.0/24 hooks.example"}})
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "hooks.example")
	require.Equal(t, []string{"203.0.113.0/24", "stripe", "198.51.100.7/32"}, source().AllowedIPs)
	redirect(cl.post(base+"/sources/github/allowed-ips", url.Values{"allowed_ips": {""}}), "ips-saved")
	require.Empty(t, source().AllowedIPs)

	// Rotate the secret: kept beside the old one, then alone. The page
	// shows fingerprints, never a secret.
	redirect(cl.post(base+"/sources/github/secret", url.Values{"secret": {"second-secret"}, "keep": {"on"}}), "secret-rotated")
	src = source()
	require.Len(t, src.Secrets, 2)
	require.Equal(t, first, src.Secrets[1].Fingerprint, "the new one first, the old kept")
	second := src.Secrets[0].Fingerprint
	redirect(cl.post(base+"/sources/github/secret", url.Values{"secret": {"third-secret"}}), "secret-rotated")
	src = source()
	require.Len(t, src.Secrets, 1)
	require.NotEqual(t, second, src.Secrets[0].Fingerprint)
	page := cl.get(base).body
	require.Contains(t, page, src.Secrets[0].Fingerprint)
	for _, secret := range []string{"first-secret", "second-secret", "third-secret"} {
		require.NotContains(t, page, secret)
	}
	require.Equal(t, 400, cl.post(base+"/sources/github/secret", url.Values{"secret": {""}}).status)
	require.Equal(t, 404, cl.post(base+"/sources/nope/enabled", url.Values{"enabled": {"true"}}).status)

	// Rate limits: 0, the cloud's default, is said with its value.
	a = cl.get(base)
	require.Regexp(t, `In force: \d+ a minute, burst \d+ — 0 is the cloud's default`, a.body)
	redirect(cl.post(base+"/limits", url.Values{"rate_limit_per_min": {"30"}, "rate_limit_burst": {"5"}}), "limits-saved")
	a = cl.get(base)
	require.Contains(t, a.body, "In force: 30 a minute, burst 5.")
	h, err := b.store.HostGet(ctx, hostID)
	require.NoError(t, err)
	require.Equal(t, 30, h.RateLimitPerMin)
	require.Equal(t, 5, h.RateLimitBurst)
	a = cl.post(base+"/limits", url.Values{"rate_limit_per_min": {"lots"}})
	require.Equal(t, 400, a.status)
	require.Contains(t, a.body, "rate_limit_per_min must be a whole number")

	// Deactivate: a confirmation first.
	a = cl.post(base+"/deactivate", nil)
	require.Equal(t, 303, a.status)
	require.Equal(t, base+"/deactivate", a.header.Get("Location"), "unconfirmed: to the confirmation page")
	h, _ = b.store.HostGet(ctx, hostID)
	require.Equal(t, store.HostActive, h.Status)
	redirect(cl.post(base+"/deactivate", url.Values{"confirm": {"yes"}}), "deactivated")
	h, _ = b.store.HostGet(ctx, hostID)
	require.Equal(t, store.HostDeactivated, h.Status)
	a = cl.post(base+"/claim-code", nil)
	require.Equal(t, 410, a.status, "as the API answers")
	require.Contains(t, a.body, "cannot be claimed again")
}

func TestSparkline(t *testing.T) {
	svg := string(Sparkline([]int{0, 5, 10}, "15 <webhooks>"))
	require.Contains(t, svg, `<polyline class="spark-line" points="1.0,23.0 60.0,12.0 119.0,1.0"/>`, "scaled to the peak")
	require.Contains(t, svg, "<title>15 &lt;webhooks&gt;</title>")
	require.NotContains(t, svg, "style")
	flat := string(Sparkline([]int{0, 0, 0}, ""))
	require.Contains(t, flat, `points="1.0,23.0 60.0,23.0 119.0,23.0"`, "all zeros: flat at the bottom")
	require.Contains(t, string(Sparkline(nil, "")), `points="1.0,23.0 119.0,23.0"`, "none: a flat line")
	require.Contains(t, string(Sparkline([]int{4}, "")), `points="1.0,1.0 119.0,1.0"`, "one: a level line")
	huge := string(Sparkline([]int{1, 1_000_000}, ""))
	require.Contains(t, huge, `points="1.0,23.0 119.0,1.0"`)
}

func TestHumanUnits(t *testing.T) {
	require.Equal(t, "25 MiB", humanBytes(25<<20))
	require.Equal(t, "64 KiB", humanBytes(64<<10))
	require.Equal(t, "1000 bytes", humanBytes(1000))
	require.Equal(t, "45s", humanDuration(45*time.Second))
	require.Equal(t, "12m", humanDuration(12*time.Minute+5*time.Second))
	require.Equal(t, "3h 5m", humanDuration(3*time.Hour+5*time.Minute))
	require.Equal(t, "2d 4h", humanDuration(52*time.Hour))
	require.Equal(t, "0s", humanDuration(-time.Second))
}
