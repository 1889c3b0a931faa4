package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestHostPageInBrowser opens the running host's page in headless Chromium:
// a webhook forwarded to the app shows as handled with its summary, one
// whose exec handler fails shows in Errors with its output as text (the
// <script> it prints runs nowhere), a running handler shows with its
// source's lane, the connection names the transport (the socket, and on a
// second host the heartbeat), and the page's own stylesheet and script load
// under its CSP. Each view is screenshotted.
func TestHostPageInBrowser(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	s := newHostSetup(t, "page-host")
	rc := startReceiver(t)
	failing := script(t, `echo "reading the comment"
echo '<script>document.title="pwned"; window.pwned = true</script> <b>not bold</b>'
echo 'giving up: the model is unreachable' >&2
exit 1
`)
	gate := filepath.Join(t.TempDir(), "open")
	slow := script(t, fmt.Sprintf("echo started\nwhile [ ! -e %q ]; do sleep 0.05; done\necho done\n", gate))
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{"webhooks": map[string]any{
		"github": map[string]any{"enabled": true, "routes": []any{
			map[string]any{"events": []string{"issue_comment"}, "exec": []string{failing}, "retry_nonzero_exit": false},
			map[string]any{"events": []string{"pull_request"}, "forward": rc.url},
			map[string]any{"events": []string{"push"}, "exec": []string{slow}},
		}},
	}})
	okID := sendGitHub(t, s.cloud.url, s.hostID, "pull_request", "page-ok", hostPayload(t, "github/pull_request.opened.json"))
	badID := sendGitHub(t, s.cloud.url, s.hostID, "issue_comment", "page-bad", hostPayload(t, "github/issue_comment.created.json"))
	eventually(t, 30*time.Second, "both recorded", func() bool {
		return h.ledgerResult(okID) == "success" && h.ledgerResult(badID) == "error"
	})
	base := "http://" + h.listen
	// A handler that runs until the test lets it finish (the source's
	// webhooks run in order: it goes last).
	runningID := sendGitHub(t, s.cloud.url, s.hostID, "push", "page-running", hostPayload(t, "github/push.json"))

	// The overview: the connection (the socket, once the host opened it),
	// the recent deliveries and the failure with its output.
	eventually(t, 30*time.Second, "the page names the socket", func() bool {
		do(t, ctx, "open the overview", chromedp.Navigate(base+"/"))
		return get(t, ctx, "transport", chromedp.Text(chromedp.ID("transport"))) == "websocket"
	})
	eventually(t, 30*time.Second, "the page shows the running handler", func() bool {
		do(t, ctx, "open the overview", chromedp.Navigate(base+"/"))
		return strings.Contains(get(t, ctx, "now", chromedp.Text(chromedp.ID("now"))), runningID)
	})
	now := get(t, ctx, "now", chromedp.Text(chromedp.ID("now")))
	require.Contains(t, now, "1 of 4 workers busy")
	require.Contains(t, get(t, ctx, "sources", chromedp.Text(chromedp.ID("sources"))), "github")
	conn := get(t, ctx, "connection", chromedp.Text(chromedp.ID("connection")))
	for _, want := range []string{"websocket since", "(configured: auto)", s.cloud.url, s.hostID, "Token expires", "Last contact"} {
		require.Contains(t, conn, want)
	}
	recent := get(t, ctx, "recent", chromedp.Text(chromedp.ID("recent")))
	require.Contains(t, recent, okID)
	require.Contains(t, recent, "handled")
	require.Contains(t, recent, "pull_request.opened")
	require.Contains(t, recent, badID)
	require.Contains(t, recent, "failed")
	errs := get(t, ctx, "errors", chromedp.Text(chromedp.ID("errors")))
	require.Contains(t, errs, badID)
	require.Contains(t, errs, `<script>document.title="pwned"; window.pwned = true</script> <b>not bold</b>`)
	require.Contains(t, errs, "giving up: the model is unreachable")
	require.Contains(t, errs, "exit 1")
	requireInert(t, ctx)
	// The stylesheet applies and the script ran (it shows the auto-refresh
	// box): both are the page's own files, allowed by its CSP.
	require.Equal(t, "rgb(16, 20, 26)", get(t, ctx, "output style",
		chromedp.Evaluate[string](`getComputedStyle(document.querySelector("pre.output")).backgroundColor`)))
	require.False(t, get(t, ctx, "auto-refresh box", chromedp.Evaluate[bool](`document.getElementById("auto").hidden`)))
	screenshot(t, ctx, "overview")
	if dir := os.Getenv("RELAY_DOCS_SCREENSHOTS"); dir != "" {
		// The docs' picture, lossless (see docs/host.md's Host page).
		png := get(t, ctx, "docs screenshot", chromedp.FullScreenshot(100))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "host-page.png"), png, 0o644))
	}

	// Errors, from the navigation.
	do(t, ctx, "open errors", chromedp.Click(chromedp.CSS(`nav a[href="/errors"]`)), chromedp.WaitVisible(chromedp.ID("errors")))
	out := get(t, ctx, "the failure's output", chromedp.Text(chromedp.CSS("#errors pre.output")))
	require.Contains(t, out, `<script>document.title="pwned"`)
	require.NotContains(t, get(t, ctx, "errors page", chromedp.Text(chromedp.ID("errors"))), okID)
	requireInert(t, ctx)
	screenshot(t, ctx, "errors")

	// Deliveries, then the forwarded one's detail.
	do(t, ctx, "open deliveries", chromedp.Click(chromedp.CSS(`nav a[href="/deliveries"]`)), chromedp.WaitVisible(chromedp.ID("deliveries")))
	require.Contains(t, get(t, ctx, "deliveries", chromedp.Text(chromedp.ID("deliveries"))), okID)
	screenshot(t, ctx, "deliveries")
	do(t, ctx, "open the delivery", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#deliveries a[href="/delivery?id=%s"]`, url.QueryEscape(okID)))),
		chromedp.WaitVisible(chromedp.ID("delivery")))
	detail := get(t, ctx, "detail", chromedp.Text(chromedp.ID("delivery")))
	for _, want := range []string{okID, "handled", "HTTP 200", "forward", "github.number"} {
		require.Contains(t, detail, want)
	}
	screenshot(t, ctx, "detail")

	// The failure's detail shows its whole output as text.
	do(t, ctx, "open the failure", chromedp.Navigate(base+"/delivery?id="+url.QueryEscape(badID)))
	require.True(t, strings.HasPrefix(get(t, ctx, "output", chromedp.Text(chromedp.ID("output"))), "reading the comment"))
	requireInert(t, ctx)
	screenshot(t, ctx, "failure")

	// Once the handler finishes, nothing runs.
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	eventually(t, 30*time.Second, "the slow handler recorded", func() bool { return h.ledgerResult(runningID) == "success" })
	do(t, ctx, "open the overview", chromedp.Navigate(base+"/"))
	require.Contains(t, get(t, ctx, "now", chromedp.Text(chromedp.ID("now"))), "No handler is running.")

	// A host on heartbeats says so.
	hbID, hbCode := s.cloud.newHost("page-host-heartbeats", secret)
	hb := startHost(t, s.cloud.url, hbCode, forwardTo(rc.url, map[string]any{"transport": "heartbeat"}))
	eventually(t, 30*time.Second, "the page names the heartbeat", func() bool {
		do(t, ctx, "open the heartbeat host's overview", chromedp.Navigate("http://"+hb.listen+"/"))
		return get(t, ctx, "transport", chromedp.Text(chromedp.ID("transport"))) == "heartbeat"
	})
	conn = get(t, ctx, "connection", chromedp.Text(chromedp.ID("connection")))
	require.Contains(t, conn, "(configured: heartbeat)")
	require.Contains(t, conn, hbID)
	screenshot(t, ctx, "heartbeat")

	// A page addressed by another name is refused (DNS rebinding).
	req, err := http.NewRequest("GET", base+"/", nil)
	require.NoError(t, err)
	req.Host = "rebind.example:" + strings.Split(h.listen, ":")[1]
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
}

// requireInert checks that nothing a handler printed ran: the title is the
// page's, the script did not set its flag, and the page's one script
// element is its own.
func requireInert(t *testing.T, ctx context.Context) {
	t.Helper()
	require.NotEqual(t, "pwned", get(t, ctx, "title", chromedp.Title()))
	require.False(t, get(t, ctx, "flag", chromedp.Evaluate[bool](`window.pwned === true`)))
	require.Equal(t, []string{"/assets/page.js"}, get(t, ctx, "scripts",
		chromedp.Evaluate[[]string](`Array.from(document.scripts, s => s.getAttribute("src") || "inline")`)))
	require.Zero(t, get(t, ctx, "bold", chromedp.Evaluate[int](`document.querySelectorAll("main b").length`)))
}
