package console

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
)

// pagesHost creates a host with a github source and returns its id.
func pagesHost(t *testing.T, b *bundle, name string) string {
	t.Helper()
	ctx := context.Background()
	res, err := b.app.CreateHost(ctx, name)
	require.NoError(t, err)
	_, _, err = b.app.PutSource(ctx, res.ID, "github", &server.SourceRequest{Secrets: []string{"s3cret"}})
	require.NoError(t, err)
	return res.ID
}

func pagesInsert(t *testing.T, b *bundle, hostID, event, eventType string, headers map[string]string, body string) *store.Delivery {
	t.Helper()
	now := b.clock.Now()
	r, err := b.store.DeliveryInsert(context.Background(), &store.DeliveryInsertParams{ID: store.DeliveryID("github", event, now),
		HostID: hostID, Source: "github", EventID: event, EventType: eventType, Headers: headers, RawBody: []byte(body), ReceivedAt: now})
	require.NoError(t, err)
	return r.Delivery
}

// deadLetter leases the host's available deliveries and nacks d for good.
func deadLetter(t *testing.T, b *bundle, d *store.Delivery) {
	t.Helper()
	ctx := context.Background()
	now := b.clock.Now()
	_, err := b.store.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: d.HostID, Max: 100, LeaseFor: time.Minute, Now: now})
	require.NoError(t, err)
	n, err := b.store.DeliveryNack(ctx, delivery.NackParams(d.HostID, []delivery.Nack{{ID: d.ID, Error: "handler <b>failed</b>"}},
		delivery.DefaultRetryPolicy, now))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func statusOf(t *testing.T, b *bundle, d *store.Delivery) store.Status {
	t.Helper()
	got, err := b.store.DeliveryGet(context.Background(), d.HostID, d.ID)
	require.NoError(t, err)
	return got.Status
}

// Every page of the deliveries, in its states, with the security headers
// and nothing inline; what a sender controls (body, headers, event type)
// is shown as text.
func TestDeliveryPages(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	checkPage(t, "deliveries, none", cl.get("/console/deliveries"))
	checkPage(t, "volume, none", cl.get("/console/volume"))
	checkPage(t, "rejections, no host", cl.get("/console/rejections"))

	h := pagesHost(t, b, "office")
	evil := `<script>document.title="pwned"</script>`
	d := pagesInsert(t, b, h, "evt-1", `push<script>x()</script>`, map[string]string{"X-Evil": evil, "Content-Type": "application/json"},
		`{"html":"`+strings.ReplaceAll(evil, `"`, `\"`)+`","n":1}`)
	plain := pagesInsert(t, b, h, "evt-2", "ping", map[string]string{}, evil)
	require.NoError(t, b.store.RejectionInsert(context.Background(), &store.Rejection{HostID: h, Source: "github", At: b.clock.Now(),
		Status: 401, Reason: "signature: " + evil, ClientIP: "192.0.2.7", HeaderNames: []string{"x-hub-signature-256", "<script>"}}))

	a := cl.get("/console/deliveries")
	checkPage(t, "deliveries", a)
	require.Contains(t, a.body, "evt-1")
	require.Contains(t, a.body, "push&lt;script&gt;x()&lt;/script&gt;")
	a = cl.get("/console/deliveries?status=queued&host=" + h)
	checkPage(t, "deliveries, filtered", a)
	require.Contains(t, a.body, "evt-2")
	a = cl.get("/console/deliveries?status=lost")
	require.Equal(t, 400, a.status)
	checkPage(t, "deliveries, bad filter", a)
	require.Contains(t, a.body, "unknown status")

	for name, path := range map[string]string{"delivery": deliveryHref(h, d.ID), "delivery, raw": deliveryHref(h, d.ID) + "?raw=1",
		"delivery, not JSON": deliveryHref(h, plain.ID)} {
		a = cl.get(path)
		checkPage(t, name, a)
		require.NotContains(t, a.body, "<script>document", name)
		require.Contains(t, a.body, "&lt;script&gt;", name)
	}
	a = cl.get(deliveryHref(h, d.ID))
	require.Contains(t, a.body, "  &#34;n&#34;: 1", "indented JSON")
	require.Contains(t, a.body, `?raw=1">Raw</a>`)
	require.Contains(t, a.body, "received")
	require.NotContains(t, a.body, `id="retry"`, "a queued delivery is not retried")
	a = cl.get(deliveryHref(h, "github:none:1"))
	require.Equal(t, 404, a.status)
	checkPage(t, "delivery, not found", a)
	a = cl.get(deliveryHref("h_other", d.ID))
	require.Equal(t, 404, a.status, "another host's")

	deadLetter(t, b, d)
	a = cl.get(deliveryHref(h, d.ID))
	checkPage(t, "delivery, dead-lettered", a)
	require.Contains(t, a.body, `id="retry"`)
	require.Contains(t, a.body, "handler &lt;b&gt;failed&lt;/b&gt;")
	a = cl.get("/console/deliveries?status=dlq&host=" + h)
	checkPage(t, "dead letters", a)
	require.Contains(t, a.body, "/console/hosts/"+h+"/dlq/purge")
	a = cl.get("/console/hosts/" + h + "/dlq/purge")
	checkPage(t, "purge confirmation", a)
	require.Contains(t, a.body, "Purge 1 dead letter<")
	a = cl.get("/console/hosts/h_none/dlq/purge")
	require.Equal(t, 404, a.status)

	a = cl.get("/console/volume")
	checkPage(t, "volume", a)
	require.Contains(t, a.body, `<svg class="chart"`)
	a = cl.get("/console/volume?host=" + h)
	checkPage(t, "volume, host", a)
	require.Equal(t, 2, strings.Count(a.body, `<svg class="chart"`), "the relay's and the host's")
	checkPage(t, "volume, no such host", cl.get("/console/volume?host=%3Cscript%3E"))

	a = cl.get("/console/rejections?host=" + h)
	checkPage(t, "rejections", a)
	require.Contains(t, a.body, "192.0.2.7")
	require.Contains(t, a.body, "signature: &lt;script&gt;")
	a = cl.get("/console/rejections?cursor=x")
	require.Equal(t, 400, a.status)
	checkPage(t, "rejections, bad cursor", a)
}

// Retry, purge and release change state only with the session's CSRF
// token; without it they answer 403 and nothing changes.
func TestDeliveryFormsNeedCSRF(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	h := pagesHost(t, b, "office")
	d := pagesInsert(t, b, h, "evt-1", "push", map[string]string{}, `{}`)
	deadLetter(t, b, d)
	retry := url.Values{"host": {h}, "id": {d.ID}}
	purge := "/console/hosts/" + h + "/dlq/purge"

	for name, form := range map[string]url.Values{"missing": {}, "wrong": {CSRFField: {"forged"}}} {
		for path, f := range map[string]url.Values{"/console/deliveries/retry": retry, purge: {"confirm": {"yes"}}, "/console/quarantine/release": {}} {
			body := url.Values{}
			for k, v := range f {
				body[k] = v
			}
			for k, v := range form {
				body[k] = v
			}
			a := cl.do("POST", path, body, map[string]string{"Origin": b.srv.URL})
			require.Equal(t, 403, a.status, "%s token: %s", name, path)
			checkPage(t, "refused", a)
		}
	}
	// Cross-site, even with the token.
	retry.Set(CSRFField, cl.csrf())
	a := cl.do("POST", "/console/deliveries/retry", retry, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, 403, a.status)
	require.Equal(t, store.StatusDLQ, statusOf(t, b, d), "nothing changed")

	a = cl.post("/console/deliveries/retry", url.Values{"host": {h}, "id": {d.ID}})
	require.Equal(t, 303, a.status, a.body)
	require.Equal(t, deliveryHref(h, d.ID)+"?retried=1", a.header.Get("Location"))
	require.Equal(t, store.StatusQueued, statusOf(t, b, d))
	a = cl.get(a.header.Get("Location"))
	require.Contains(t, a.body, "Retried")
	a = cl.post("/console/deliveries/retry", url.Values{"host": {h}, "id": {d.ID}})
	require.Equal(t, 409, a.status, "a queued delivery: the API's conflict")
	checkPage(t, "retry refused", a)

	deadLetter(t, b, d)
	a = cl.post(purge, nil)
	require.Equal(t, 400, a.status, "not confirmed")
	require.Equal(t, store.StatusDLQ, statusOf(t, b, d))
	a = cl.post(purge, url.Values{"confirm": {"yes"}})
	require.Equal(t, 303, a.status, a.body)
	require.Contains(t, a.header.Get("Location"), "purged=1")
	_, err := b.store.DeliveryGet(context.Background(), h, d.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "purged")
	a = cl.get(a.header.Get("Location"))
	require.Contains(t, a.body, "Purged 1 dead letter.")

	a = cl.post("/console/quarantine/release", nil)
	require.Equal(t, 303, a.status, a.body)
	a = cl.get(a.header.Get("Location"))
	checkPage(t, "released", a)
	require.Contains(t, a.body, "Release pass done: 0 admitted, 0 rejected, 0 still held.")
}

// The delivery page says what to do next (as inspect does), replays with
// the session's CSRF token — to its host, or another — and links a replay
// and its original both ways.
func TestDeliveryReplayPage(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	h := pagesHost(t, b, "office")
	other := pagesHost(t, b, "laptop")
	d := pagesInsert(t, b, h, "evt-1", "push", map[string]string{"x-github-event": "push"}, `{"n":1}`)

	a := cl.get(deliveryHref(h, d.ID))
	checkPage(t, "delivery, queued", a)
	require.Contains(t, a.body, `id="next-action"`)
	require.Contains(t, a.body, "nothing ran since it was queued")
	require.Contains(t, a.body, `id="replay"`, "any delivery can be replayed")

	replay := url.Values{"host": {h}, "id": {d.ID}}
	a = cl.do("POST", "/console/deliveries/replay", replay, map[string]string{"Origin": b.srv.URL})
	require.Equal(t, 403, a.status, "no CSRF token")

	a = cl.post("/console/deliveries/replay", replay)
	require.Equal(t, 303, a.status, a.body)
	loc := a.header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/console/hosts/"+h+"/deliveries/"), loc)
	require.True(t, strings.HasSuffix(loc, "?replayed=1"), loc)
	a = cl.get(loc)
	checkPage(t, "a replay", a)
	require.Contains(t, a.body, "Replayed: this is a new delivery")
	require.Contains(t, a.body, `id="replay-of" href="`+deliveryHref(h, d.ID)+`"`)

	a = cl.post("/console/deliveries/replay", url.Values{"host": {h}, "id": {d.ID}, "to": {other}})
	require.Equal(t, 303, a.status, a.body)
	require.True(t, strings.HasPrefix(a.header.Get("Location"), "/console/hosts/"+other+"/deliveries/"))

	a = cl.get(deliveryHref(h, d.ID))
	require.Contains(t, a.body, `id="replays"`)
	require.Equal(t, 2, strings.Count(a.body, "replayed as "), "both notes in the timeline")
	require.Contains(t, a.body, "/console/hosts/"+other+"/deliveries/")

	a = cl.post("/console/deliveries/replay", url.Values{"host": {h}, "id": {d.ID}, "to": {"h_nosuchhostaaaaaaaaaaaaa"}})
	require.Equal(t, 404, a.status, "the API's answer")
	checkPage(t, "replay refused", a)
}

// The host's page compares the configuration the host reported with the
// cloud's sources, as `host run --check` does: a typo is named with the
// name it likely stands for.
func TestHostPageComparesTheHostsConfiguration(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	h := pagesHost(t, b, "office")
	a := cl.get("/console/hosts/" + h)
	checkPage(t, "host, nothing reported", a)
	require.Contains(t, a.body, "has not told the cloud its configuration yet")

	report := func(sub string) {
		t.Helper()
		require.NoError(t, b.store.HostHeartbeat(context.Background(), &store.HostHeartbeatParams{HostID: h,
			Subscription: []byte(sub), Now: b.clock.Now()}))
	}
	report(`{"webhooks":{"githb":{"enabled":true}}}`)
	a = cl.get("/console/hosts/" + h)
	checkPage(t, "host, a typo", a)
	require.Contains(t, a.body, `class="mismatch mismatch-not-in-cloud"`)
	require.Contains(t, a.body, "did you mean &#34;github&#34;?")
	require.Contains(t, a.body, `class="mismatch mismatch-not-on-host"`)

	report(`{"webhooks":{"github":{"enabled":true}}}`)
	a = cl.get("/console/hosts/" + h)
	require.Contains(t, a.body, `id="config-matches"`)
	require.NotContains(t, a.body, `class="mismatch`)

	// A group's source reaches the host's handler of that name: the
	// host that has one matches, one that has none is told.
	ctx := context.Background()
	_, err := b.store.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_pagesgroup0000000000000", Name: "team", Now: b.clock.Now()})
	require.NoError(t, err)
	_, err = b.store.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_pagesgroup0000000000000", HostID: h, Now: b.clock.Now()})
	require.NoError(t, err)
	_, err = b.store.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: "g_pagesgroup0000000000000", Name: "deploys",
		Provider: "github", Enabled: true, Mode: store.GroupAny, Now: b.clock.Now()})
	require.NoError(t, err)
	a = cl.get("/console/hosts/" + h)
	checkPage(t, "host, a group's source it has no handler for", a)
	require.Contains(t, a.body, `class="mismatch mismatch-not-on-host"`)
	report(`{"webhooks":{"github":{"enabled":true},"deploys":{"enabled":true}}}`)
	a = cl.get("/console/hosts/" + h)
	require.Contains(t, a.body, `id="config-matches"`, "the group's source is one the host handles")
}
