package localapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/ledger"
)

// getPage fetches path and returns the status, headers and body.
func getPage(t *testing.T, base, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(body)
}

// getPageAs gets a page that must answer status with contentType, and
// returns its body.
func getPageAs(t *testing.T, base, path string, status int, contentType string) string {
	t.Helper()
	got, h, body := getPage(t, base, path)
	require.Equal(t, status, got, path)
	require.Equal(t, contentType, h.Get("Content-Type"), path)
	return body
}

const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

// seedPage records one delivery of each result, one of them with hostile
// output, event type and summary, and a GitHub pull request's fields.
func seedPage(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	exit1, status200 := 1, 200
	for _, e := range []ledger.Entry{
		{DeliveryID: "github:pr-7:1", Source: "github", EventType: "pull_request", EventAction: "opened",
			Result: ledger.ResultSuccess, DurationMS: 1250, Handler: "forward http://127.0.0.1:3000/github",
			ResponseStatus: &status200, Output: "ok", Summary: "pull_request.opened acme/app #7",
			Fields:      map[string]string{"github.url": "https://github.com/acme/app/pull/7", "github.number": "7"},
			ProcessedAt: now.Add(-3 * time.Minute), ReceivedAt: now.Add(-4 * time.Minute), CloudAttempt: 1},
		{DeliveryID: "slack:evil:1", Source: "slack", EventType: hostile, Result: ledger.ResultError,
			Error: "exit status 1", ExitCode: &exit1, Handler: "exec ./answer.sh", Output: "boom " + hostile,
			Summary: "summary " + hostile, Fields: map[string]string{"github.url": "javascript:alert(1)", "slack.thread_ts": "1700.1"},
			DurationMS: 40, ProcessedAt: now.Add(-2 * time.Minute), CloudAttempt: 2},
		{DeliveryID: "stripe:evt_1:1", Source: "stripe", EventType: "charge.succeeded", Result: ledger.ResultSkipped,
			Output: "no route for charge.succeeded", ProcessedAt: now.Add(-time.Minute)},
	} {
		_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: e})
		require.NoError(t, err)
	}
}

func pageAgent() fakeAgent {
	skew := 3 * time.Second
	return fakeAgent{last: now.Add(-5 * time.Second), lastErr: "dial tcp: connection refused", skew: &skew,
		status: agent.Status{
			HostID: "h_page", Workers: 4, Window: 32, InFlight: 3, Credit: 29, Queued: 1,
			Running: []agent.RunningWebhook{{DeliveryID: "github:slow:1", Source: "github", EventType: "push",
				Attempt: 2, Started: now.Add(-90 * time.Second)}},
			Sources: []agent.SourceLoad{{Source: "github", Running: 1, Waiting: 1}},
			Link: agent.LinkStatus{Configured: "auto", Compress: true, InUse: "websocket", Since: now.Add(-time.Hour),
				LastContact: now.Add(-5 * time.Second), LastError: "dial tcp: connection refused", SocketConnects: 3, Reconnects: 2, Fallbacks: 1,
				TokenExpires: now.Add(10 * time.Minute), Skew: skew, SkewKnown: true},
		}}
}

func setupPage(t *testing.T) (string, *ledger.Ledger) {
	t.Helper()
	srv, l := setup(t, pageAgent())
	srv.Config.Handler.(*Server).SetCloudURL("https://relay.example.com")
	return srv.URL, l
}

// TestPageOverview: the overview shows the connection, what runs and
// waits, the recent deliveries of every result with their summaries, and
// the recent failures with their output.
func TestPageOverview(t *testing.T) {
	t.Parallel()
	base, l := setupPage(t)

	body := getPageAs(t, base, "/", http.StatusOK, "text/html; charset=utf-8")
	require.Contains(t, body, "No deliveries.")
	require.Contains(t, body, "No failures.")

	seedPage(t, l)
	status, _, body := getPage(t, base, "/")
	require.Equal(t, http.StatusOK, status)
	for _, want := range []string{
		// connection
		`<strong id="transport">websocket</strong>`, "since 2026-02-16 11:00:00 (1 h 0 min ago)",
		"(configured: auto, compressed)", "2026-02-16 11:59:55 (5.0 s ago)", "dial tcp: connection refused",
		"<code>https://relay.example.com</code>", "<code>h_page</code>", "2026-02-16 12:10:00 (in 10 min 0 s)",
		"3.0 s ahead of the cloud", "3 (2 reconnects) · fallbacks to heartbeats: 1",
		// running and waiting
		"1 of 4 workers busy · 1 waiting for a worker · 3 in flight of a lease window of 32 (credit 29)",
		"3 outcomes not yet reported",
		"<code>github:slow:1</code>", "1 min 30 s",
		// recent deliveries, every result, summary linked
		`<span class="result success">handled</span>`, `<span class="result error">failed</span>`,
		`<span class="result skipped">skipped</span>`,
		`<a href="https://github.com/acme/app/pull/7" rel="noreferrer noopener">pull_request.opened acme/app #7</a>`,
		"1.2 s", `href="/delivery?id=github%3Apr-7%3A1"`, "thread 1700.1",
		// the failure with its output
		"boom &lt;script&gt;", "exit 1",
		`<span class="badge ok" id="health">ok</span>`,
	} {
		require.Contains(t, body, want)
	}
}

// TestPageEscapes: what handlers print and payloads say is shown as text,
// never as markup, a script or a link of another scheme.
func TestPageEscapes(t *testing.T) {
	t.Parallel()
	base, l := setupPage(t)
	seedPage(t, l)
	for _, path := range []string{"/", "/deliveries", "/errors", "/delivery?id=" + url.QueryEscape("slack:evil:1")} {
		status, _, body := getPage(t, base, path)
		require.Equal(t, http.StatusOK, status, path)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<img src=x", path)
		require.NotContains(t, body, `href="javascript:`, path)
		require.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", path)
		// The only script is the page's own file; no inline script or style.
		require.Equal(t, 1, strings.Count(body, "<script"), path)
		require.Contains(t, body, `<script src="/assets/page.js" defer></script>`)
		require.NotContains(t, body, "style=", path)
		require.NotRegexp(t, regexp.MustCompile(`(?i)<[^>]*\son[a-z]+=`), body, path)
	}
}

// TestPageHeaders: pages and assets carry the CSP and the other headers;
// no page is cached.
func TestPageHeaders(t *testing.T) {
	t.Parallel()
	base, l := setupPage(t)
	seedPage(t, l)
	for _, path := range []string{"/", "/deliveries", "/errors", "/delivery?id=github%3Apr-7%3A1",
		"/delivery?id=nope", "/deliveries?limit=0", "/assets/style.css", "/assets/page.js"} {
		_, h, _ := getPage(t, base, path)
		require.Equal(t, pageCSP, h.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), path)
		require.Equal(t, "no-store", h.Get("Cache-Control"), path)
		require.Equal(t, "no-referrer", h.Get("Referrer-Policy"), path)
		require.Equal(t, "DENY", h.Get("X-Frame-Options"), path)
	}
	require.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; "+
		"form-action 'none'; frame-ancestors 'none'; base-uri 'none'", pageCSP)
	_, h, css := getPage(t, base, "/assets/style.css")
	require.Equal(t, "text/css; charset=utf-8", h.Get("Content-Type"))
	require.Contains(t, css, "pre.output")
	_, h, _ = getPage(t, base, "/assets/page.js")
	require.Equal(t, "text/javascript; charset=utf-8", h.Get("Content-Type"))
	status, _, _ := getPage(t, base, "/assets/nope.css")
	require.Equal(t, http.StatusNotFound, status)
}

// TestPageMisdirected: the page, as the JSON API, answers 421 to a Host
// that is not a loopback name (DNS rebinding), before reading anything.
func TestPageMisdirected(t *testing.T) {
	t.Parallel()
	base, l := setupPage(t)
	seedPage(t, l)
	for _, path := range []string{"/", "/deliveries", "/errors", "/delivery?id=github%3Apr-7%3A1", "/assets/style.css"} {
		for _, host := range []string{"rebind.attacker.example:7071", "127.0.0.1.nip.io"} {
			req, err := http.NewRequest("GET", base+path, nil)
			require.NoError(t, err)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, path)
			require.NotContains(t, string(body), "pr-7")
		}
	}
	// Addressed to localhost, it is answered.
	req, err := http.NewRequest("GET", base+"/", nil)
	require.NoError(t, err)
	req.Host = "localhost:7071"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestPageLists: the deliveries page filters by result and source and
// pages with Older/Newest links; the errors page lists failures with their
// output; bad parameters get a 400 page that says why.
func TestPageLists(t *testing.T) {
	t.Parallel()
	base, l := setupPage(t)
	seedPage(t, l)

	_, _, body := getPage(t, base, "/deliveries")
	require.Contains(t, body, "github:pr-7:1")
	require.Contains(t, body, "stripe:evt_1:1")
	require.Contains(t, body, `<a href="/deliveries?result=error">failed</a>`)

	_, _, body = getPage(t, base, "/deliveries?source=stripe")
	require.Contains(t, body, "stripe:evt_1:1")
	require.NotContains(t, body, "github:pr-7:1")

	_, _, body = getPage(t, base, "/errors")
	require.Contains(t, body, "slack:evil:1")
	require.Contains(t, body, "boom &lt;script&gt;")
	require.NotContains(t, body, "github:pr-7:1")

	// Paging: one a page, newest first, until the last.
	var seen []string
	path := "/deliveries?limit=1"
	for range 5 {
		_, _, body = getPage(t, base, path)
		m := regexp.MustCompile(`<a class="id" href="[^"]+">([^<]+)</a>`).FindAllStringSubmatch(body, -1)
		require.Len(t, m, 1)
		seen = append(seen, m[0][1])
		if len(seen) > 1 {
			require.Contains(t, body, `<a href="/deliveries?limit=1">← Newest</a>`)
		}
		older := regexp.MustCompile(`<a href="([^"]+)" id="older">`).FindStringSubmatch(body)
		if older == nil {
			break
		}
		path = strings.ReplaceAll(older[1], "&amp;", "&")
	}
	require.Equal(t, []string{"stripe:evt_1:1", "slack:evil:1", "github:pr-7:1"}, seen)

	for path, want := range map[string]string{
		"/deliveries?limit=0":     "invalid limit",
		"/deliveries?result=fine": "invalid result",
		"/deliveries?cursor=zz":   "invalid cursor",
		"/deliveries?page=2":      "unknown query parameter",
		"/errors?result=success":  "result=error only",
		"/?x=1":                   "no query parameters",
		"/delivery":               "no delivery id",
		"/delivery?id=a&x=b":      "unknown query parameter",
	} {
		body := getPageAs(t, base, path, http.StatusBadRequest, "text/html; charset=utf-8")
		require.Contains(t, body, want, path)
	}
	status, _, body := getPage(t, base, "/delivery?id="+url.QueryEscape("<b>nope</b>"))
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "&#34;&lt;b&gt;nope&lt;/b&gt;&#34; is not in the ledger")
}

// TestPageDetail: a delivery's page shows everything the ledger holds of
// it, the handler's output in full, and says when it runs again now.
func TestPageDetail(t *testing.T) {
	t.Parallel()
	a := pageAgent()
	a.status.Running = append(a.status.Running, agent.RunningWebhook{DeliveryID: "slack:evil:1", Source: "slack",
		Attempt: 3, Started: now.Add(-2 * time.Second)})
	srv, l := setup(t, a)
	seedPage(t, l)
	long := strings.Repeat("line of output\n", 300) + "the end"
	exit2 := 2
	_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: ledger.Entry{
		DeliveryID: "github:long:1", Source: "github", EventType: "push", Result: ledger.ResultError,
		Error: "exit status 2", ExitCode: &exit2, Output: long, ProcessedAt: now, CorrelationID: "corr-1"}})
	require.NoError(t, err)

	_, _, body := getPage(t, srv.URL, "/delivery?id=github%3Apr-7%3A1")
	for _, want := range []string{
		"<code>github:pr-7:1</code>", `<span class="result success">handled</span>`, "pull_request.opened",
		"<code>forward http://127.0.0.1:3000/github</code> · HTTP 200", "1 run on this host; the last was the cloud's attempt 1",
		"2026-02-16 11:56:00", "2026-02-16 11:57:00 (3 min 0 s ago)", "<th>github.number</th><td><code>7</code></td>",
	} {
		require.Contains(t, body, want)
	}
	_, _, body = getPage(t, srv.URL, "/delivery?id=slack%3Aevil%3A1")
	require.Contains(t, body, "running again now</strong> (attempt 3, for 2.0 s)")
	require.Contains(t, body, "exit code 1")

	// The detail shows the whole output; lists show its end.
	_, _, body = getPage(t, srv.URL, "/delivery?id=github%3Along%3A1")
	require.Contains(t, body, long)
	require.Contains(t, body, "<code>corr-1</code>")
	_, _, body = getPage(t, srv.URL, "/errors")
	require.Contains(t, body, "…"+long[len(long)-outputPreview:])
	require.NotContains(t, body, long)
}

// TestPageNotFoundStaysJSON: paths that are neither the API nor the page
// keep the API's JSON 404.
func TestPageNotFoundStaysJSON(t *testing.T) {
	t.Parallel()
	base, _ := setupPage(t)
	body := getPageAs(t, base, "/nope", http.StatusNotFound, "application/json")
	require.Contains(t, body, fmt.Sprintf("%q", "not_found"))
}

// A failed delivery says whether it runs again: the cloud tries it again
// after its retry delay when the host asked it to, else it is
// dead-lettered and the page says how to send it again.
func TestPageSaysWhetherAFailureRunsAgain(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, pageAgent())
	for id, retryable := range map[string]bool{"github:again:1": true, "github:final:1": false} {
		_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Retryable: retryable, Entry: ledger.Entry{
			DeliveryID: id, Source: "github", EventType: "push", Result: ledger.ResultError, Error: "HTTP 500",
			ProcessedAt: now, CloudAttempt: 2}})
		require.NoError(t, err)
	}
	_, _, body := getPage(t, srv.URL, "/delivery?id=github%3Aagain%3A1")
	require.Contains(t, body, `<dd id="again">Runs again: the cloud hands it out again after its retry delay, unless attempt 2 was its last`)
	_, _, body = getPage(t, srv.URL, "/delivery?id=github%3Afinal%3A1")
	require.Contains(t, body, `<dd id="again">Does not run again: this failure is not retried`)
	require.Contains(t, body, "cloud ctl deliveries retry github:final:1")
	_, _, body = getPage(t, srv.URL, "/errors")
	require.Contains(t, body, `<p class="again">Runs again:`)
	require.Contains(t, body, `<p class="again">Does not run again:`)
	_, _, body = getPage(t, srv.URL, "/delivery?id=github%3Afinal%3A1")
	require.NotContains(t, body, "Runs again:")
}
