package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The console's deliveries pages in a real browser against the real cloud
// and host binaries: a signed webhook appears in the list, its detail shows
// a <script> in its body as text, a dead letter is retried from the console
// and acked, another is purged behind its confirmation page, the volume
// chart and the rejections are drawn. Every page is screenshotted.
func TestConsoleDeliveries(t *testing.T) {
	t.Parallel()
	eachEngine(t, testConsoleDeliveries)
}

func testConsoleDeliveries(t *testing.T, dbURL string) {
	c := startCloud(t, dbURL)
	hostID, code := c.newHost("office", secret)
	c.retrySchedule(hostID, []int{0}, 1) // one attempt: a failure is a dead letter
	app := startStatusReceiver(t)
	app.status.Store(500)
	startHost(t, c.url, code, forwardTo(app.url, nil))

	ctx := newBrowser(t)
	// open loads a console page and waits for sel on it.
	open := func(path, sel string) {
		t.Helper()
		do(t, ctx, "open "+path, chromedp.Navigate(c.url+path), chromedp.WaitVisible(chromedp.CSS(sel)))
	}
	textOf := func(sel string) string { t.Helper(); return text(t, ctx, sel) }
	click := func(what, button, sel string) { t.Helper(); submitAndWait(t, ctx, what, button, sel) }
	consoleLogin(t, ctx, c)

	// A webhook whose body, were it run as HTML, would change the page.
	body := []byte(`{"ref":"refs/heads/main","note":"<script>document.title='pwned';window.pwned=1</script>","commits":[]}`)
	id := sendGitHub(t, c.url, hostID, "push", "d-script", body)
	c.waitStatus(hostID, id, "dlq")
	open("/console/deliveries", `tr[data-delivery="`+id+`"]`)
	require.Equal(t, "dead-lettered", textOf(`tr[data-delivery="`+id+`"] .status`))
	// The host by its name, its id as the title; the badge on one line.
	require.Equal(t, "office", textOf(`tr[data-delivery="`+id+`"] td.host`))
	require.Equal(t, hostID, get(t, ctx, "the host's title",
		chromedp.Evaluate[string](`document.querySelector('tr[data-delivery="`+id+`"] td.host a').title`)))
	badge := `document.querySelector('tr[data-delivery="` + id + `"] .status')`
	require.Equal(t, "nowrap", get(t, ctx, "the badge's white-space", chromedp.Evaluate[string](`getComputedStyle(`+badge+`).whiteSpace`)))
	require.Equal(t, 1, get(t, ctx, "the badge's lines", chromedp.Evaluate[int](badge+`.getClientRects().length`)))
	screenshot(t, ctx, "deliveries")

	click("open the delivery", `tr[data-delivery="`+id+`"] td a`, "#body")
	require.Equal(t, "dead-lettered", textOf("#delivery-status"))
	require.Contains(t, textOf("#body"), `"note": "<script>document.title='pwned';window.pwned=1</script>"`, "the body as indented text")
	require.Contains(t, textOf("#last-error"), "500")
	require.Contains(t, textOf(".timeline"), "received")
	require.Contains(t, textOf("table.headers"), "x-github-event")
	title := get(t, ctx, "title", chromedp.Title())
	require.NotEqual(t, "pwned", title)
	require.Contains(t, title, "Delivery d-script")
	pwned := get(t, ctx, "window.pwned", chromedp.Evaluate[bool](`window.pwned === 1`))
	require.False(t, pwned, "the payload's script did not run")
	screenshot(t, ctx, "delivery-dead-lettered")
	click("raw body", `a[href$="?raw=1"]`, "#body")
	require.Equal(t, string(body), textOf("#body"))
	screenshot(t, ctx, "delivery-raw")

	// Retry it from the console once the app answers again: it is acked.
	app.status.Store(200)
	click("retry", "#retry", ".flash")
	require.Contains(t, textOf(".flash"), "Retried")
	screenshot(t, ctx, "delivery-retried")
	c.waitStatus(hostID, id, "acked")
	open(deliveryPath(hostID, id), "#delivery-status")
	require.Equal(t, "acked", textOf("#delivery-status"))
	require.Contains(t, textOf(".timeline"), "retried by an operator")
	require.Contains(t, textOf("#next-action"), "none")
	screenshot(t, ctx, "delivery-acked")

	// Replay the handled webhook from the console: a new delivery, run and
	// acked again, linked to the original both ways.
	click("replay", "#replay", ".flash")
	require.Contains(t, textOf(".flash"), "Replayed")
	require.Contains(t, textOf("#replay-of"), id)
	loc := get(t, ctx, "location", chromedp.Evaluate[string](`location.pathname`))
	replayID := strings.TrimPrefix(loc, "/console/hosts/"+hostID+"/deliveries/")
	require.NotEqual(t, id, replayID)
	screenshot(t, ctx, "delivery-replayed")
	c.waitStatus(hostID, replayID, "acked")
	open(deliveryPath(hostID, id), "#replays")
	require.Contains(t, textOf("#replays"), replayID)

	// Another dead letter, purged from the dead letters page.
	app.status.Store(500)
	dead := sendGitHub(t, c.url, hostID, "push", "d-dead", []byte(`{"ref":"refs/heads/dev"}`))
	c.waitStatus(hostID, dead, "dlq")
	open("/console/deliveries?status=dlq&host="+hostID, `tr[data-delivery="`+dead+`"]`)
	screenshot(t, ctx, "dead-letters")
	click("ask to purge", `a[href$="/dlq/purge"]`, "#purge")
	require.Contains(t, textOf("#purge"), "Purge 1 dead letter")
	screenshot(t, ctx, "purge-confirm")
	click("purge", "#purge", ".flash")
	require.Equal(t, "Purged 1 dead letter.", textOf(".flash"))
	require.Empty(t, c.deliveries(hostID, "dlq"))
	screenshot(t, ctx, "purged")

	// A webhook with a bad signature is a rejection.
	status, _, err := signGitHub("not-the-secret", "push", "d-forged", body).send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 401, status)
	open("/console/rejections?host="+hostID, "table.rejections")
	require.Contains(t, textOf("table.rejections"), "signature")
	require.Contains(t, textOf("table.rejections"), "x-hub-signature-256")
	screenshot(t, ctx, "rejections")

	open("/console/volume?host="+hostID, "svg.chart")
	n := get(t, ctx, "bars", chromedp.Evaluate[int](`document.querySelectorAll("svg.chart rect.seg-received").length`))
	require.Equal(t, 2, n, "the relay's and the host's hour of received webhooks")
	require.Contains(t, textOf("table.totals"), "received")
	screenshot(t, ctx, "volume")
}

func deliveryPath(hostID, id string) string {
	return "/console/hosts/" + hostID + "/deliveries/" + id
}
