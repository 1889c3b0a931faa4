package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
)

// edgeBundle is a server over a given store, key ring and config, so tests
// can restart "the cloud" with other keys over the same database.
type edgeBundle struct {
	*bundle
	srv *Server
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	return sqlitetest.Open(t)
}

func ringOf(t *testing.T, keyBytes ...byte) *secrets.Ring {
	t.Helper()
	var raw [][]byte
	for _, b := range keyBytes {
		raw = append(raw, bytes.Repeat([]byte{b}, 32))
	}
	r, err := secrets.NewRing(raw...)
	require.NoError(t, err)
	return r
}

func newEdge(t *testing.T, st store.Store, ring *secrets.Ring, clock *clockwork.FakeClock, cfg Config) *edgeBundle {
	t.Helper()
	return startEdge(t, st, ring, clock, cfg, jwtKey, io.Discard)
}

// startEdge serves a server over st with the admin token set, signing host
// tokens with key and logging to log.
func startEdge(t *testing.T, st store.Store, ring *secrets.Ring, clock *clockwork.FakeClock, cfg Config, key []byte, log io.Writer) *edgeBundle {
	t.Helper()
	tokens, err := auth.NewTokens(key, 0, clock)
	require.NoError(t, err)
	cfg.AdminToken = testAdmin
	s := New(st, ring, tokens, clock, slog.New(slog.NewTextHandler(log, nil)), cfg)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &edgeBundle{bundle: &bundle{t: t, srv: hs, store: st, clock: clock}, srv: s}
}

func newClock() *clockwork.FakeClock {
	return clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
}

// genericHeaders signs body as a generic source expects by default.
func genericHeaders(secret, eventID string, body []byte) map[string]string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return map[string]string{"X-Signature": "sha256=" + hex.EncodeToString(m.Sum(nil)), "X-Event-Id": eventID}
}

func (b *edgeBundle) addSource(hostID, name string, body map[string]any) {
	b.t.Helper()
	a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/"+name, body)
	require.Contains(b.t, []int{200, 201}, a.status, string(a.body))
}

func (b *edgeBundle) rejections(hostID string) []rejectionJSON {
	b.t.Helper()
	a := b.admin("GET", "/api/hosts/"+hostID+"/rejections", nil)
	require.Equal(b.t, 200, a.status, string(a.body))
	var r rejectionsResponse
	a.json(b.t, &r)
	return r.Rejections
}

func TestRateLimitRetryingProvider(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 60, RateLimitBurst: 2})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "billing", map[string]any{"provider": "generic", "secrets": []string{"s"}})
	send := func(id string) answer {
		body := []byte(`{"n":"` + id + `"}`)
		return b.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s", id, body))
	}
	require.Equal(t, 202, send("1").status)
	require.Equal(t, 202, send("2").status)
	a := send("3")
	require.Equal(t, 429, a.status, string(a.body))
	require.Equal(t, shared.CodeRateLimited, a.errCode(t))
	require.Equal(t, "1", a.header.Get("Retry-After"), "one token a second at 60/min")
	require.Equal(t, 2, b.count(hostID), "nothing stored for the 429")

	rs := b.rejections(hostID)
	require.Len(t, rs, 1)
	require.Equal(t, 429, rs[0].Status)
	require.Equal(t, "billing", rs[0].Source)
	require.Contains(t, rs[0].Reason, "rate limit")

	// A token comes back a second later (fake time).
	b.clock.Advance(time.Second)
	require.Equal(t, 202, send("3").status)

	// The host's own limit wins over the server's default, at once: the
	// empty bucket is not left to refill at the new rate.
	require.Equal(t, 429, send("4").status)
	a = b.admin("PATCH", "/api/hosts/"+hostID, map[string]int{"rate_limit_per_min": 6000, "rate_limit_burst": 100})
	require.Equal(t, 200, a.status, string(a.body))
	for i := range 100 {
		a := send("burst-" + strconv.Itoa(i))
		require.Equal(t, 202, a.status, "request %d after the PATCH: %s", i, a.body)
	}
	a = send("burst-100")
	require.Equal(t, 429, a.status, "the new burst is 100")
	require.Equal(t, "1", a.header.Get("Retry-After"), "a token every 10 ms at 6000/min")

	// Lowered, it applies at once too.
	b.clock.Advance(time.Second)
	a = b.admin("PATCH", "/api/hosts/"+hostID, map[string]int{"rate_limit_per_min": 1, "rate_limit_burst": 1})
	require.Equal(t, 200, a.status, string(a.body))
	require.Equal(t, 202, send("low-1").status)
	a = send("low-2")
	require.Equal(t, 429, a.status)
	require.Equal(t, "60", a.header.Get("Retry-After"))
}

func TestRateLimitNonRetryingProviderStoresVerified(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 60, RateLimitBurst: 1})
	hostID, _ := b.newHost("h")
	require.Equal(t, 200, b.sendGitHub(hostID, "d-1", prBody).status)

	// Over the limit but verified: GitHub never retries, so it is kept.
	a := b.sendGitHub(hostID, "d-2", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	require.Equal(t, "queued", r.Status)
	events, err := b.store.DeliveryEventList(context.Background(), r.DeliveryID)
	require.NoError(t, err)
	require.Contains(t, events[0].Reason, "over the host's rate limit", "flagged in the audit trail")

	// Over the limit and not verified: 429, nothing stored.
	h := ghHeaders("wrong-secret", "d-3", prBody)
	a = b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h)
	require.Equal(t, 429, a.status, string(a.body))
	require.NotEmpty(t, a.header.Get("Retry-After"))
	require.Equal(t, 2, b.count(hostID))

	// Counted.
	m := b.admin("GET", "/metrics", nil)
	require.Equal(t, 200, m.status)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="over_limit_stored",provider="github"} 1`)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="rate_limited",provider="github"} 1`)
}

func TestRejectionsAudit(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "small", map[string]any{"provider": "generic", "secrets": []string{"s"}, "max_body_bytes": 16})

	tampered := ghHeaders(testSecret, "d-1", prBody)
	a := b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(append([]byte{' '}, prBody...)), tampered)
	require.Equal(t, 401, a.status)
	big := bytes.Repeat([]byte("x"), 17)
	a = b.do("POST", "/api/webhooks/"+hostID+"/small", bytes.NewReader(big), genericHeaders("s", "e", big))
	require.Equal(t, 413, a.status)

	rs := b.rejections(hostID)
	require.Len(t, rs, 2)
	require.Equal(t, 413, rs[0].Status, "newest first")
	require.Equal(t, "small", rs[0].Source)
	require.Equal(t, 401, rs[1].Status)
	require.Equal(t, "github", rs[1].Source)
	require.Contains(t, rs[1].Reason, "signature")
	require.Equal(t, "127.0.0.1", rs[1].ClientIP)
	require.Contains(t, rs[1].HeaderNames, "x-hub-signature-256")
	raw := b.admin("GET", "/api/hosts/"+hostID+"/rejections", nil)
	require.NotContains(t, string(raw.body), tampered["X-Hub-Signature-256"][7:], "header values are never kept")
	require.NotContains(t, string(raw.body), testSecret)

	// Paging, bad input and authorization.
	a = b.admin("GET", "/api/hosts/"+hostID+"/rejections?limit=1", nil)
	var page rejectionsResponse
	a.json(t, &page)
	require.Len(t, page.Rejections, 1)
	require.NotEmpty(t, page.NextCursor)
	a = b.admin("GET", "/api/hosts/"+hostID+"/rejections?limit=1&cursor="+page.NextCursor, nil)
	var last rejectionsResponse
	a.json(t, &last)
	require.Len(t, last.Rejections, 1)
	require.Equal(t, 401, last.Rejections[0].Status)
	require.Empty(t, last.NextCursor, "a full last page says it is the last")
	for _, q := range []string{"?cursor=abc", "?cursor=-1", "?limit=0", "?limit=501", "?limit=x"} {
		a = b.admin("GET", "/api/hosts/"+hostID+"/rejections"+q, nil)
		require.Equal(t, 400, a.status, q)
		require.Equal(t, shared.CodeInvalid, a.errCode(t))
	}
	a = b.admin("GET", "/api/hosts/h_unknown/rejections", nil)
	require.Equal(t, 404, a.status)
	require.Contains(t, string(a.body), "no such host")
	a = b.do("GET", "/api/hosts/"+hostID+"/rejections", nil, nil)
	require.Equal(t, 401, a.status)
	a = b.do("GET", "/metrics", nil, nil)
	require.Equal(t, 401, a.status, "metrics need the admin token")
}

func TestRejectionsAuditIsSampled(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 100000})
	hostID, _ := b.newHost("h")
	bad := ghHeaders("wrong", "d", prBody)
	for range 100 {
		require.Equal(t, 401, b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), bad).status)
	}
	a := b.admin("GET", "/api/hosts/"+hostID+"/rejections?limit=500", nil)
	var page rejectionsResponse
	a.json(t, &page)
	require.Len(t, page.Rejections, 60, "at most 60 a minute per host are recorded")
	m := b.admin("GET", "/metrics", nil)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="bad_signature",provider="github"} 100`, "all are counted")
}

func TestQuarantineAndRelease(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	good.addSource(hostID, "billing", map[string]any{"provider": "generic", "secrets": []string{"s"}})

	// The cloud restarted with an unrelated key: nothing decrypts.
	lost := newEdge(t, st, ringOf(t, 9), clock, Config{QuarantineMax: 3, QuarantineHostMax: 3})
	cs, err := intake.CheckCanary(context.Background(), st, ringOf(t, 9))
	require.NoError(t, err)
	require.True(t, cs.Created, "the first check seals a canary")

	sent := clock.Now()
	a := lost.sendGitHub(hostID, "d-1", prBody)
	require.Equal(t, 503, a.status, string(a.body))
	require.Equal(t, shared.CodeUnavailable, a.errCode(t))
	require.NotEmpty(t, a.header.Get("Retry-After"))
	tampered := ghHeaders(testSecret, "d-2", prBody)
	a = lost.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader([]byte(`{"forged":true}`)), tampered)
	require.Equal(t, 503, a.status, "not verifiable yet: kept too")
	body := []byte(`{"invoice":"in_1"}`)
	a = lost.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s", "evt_1", body))
	require.Equal(t, 503, a.status)
	a = lost.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s", "evt_2", body))
	require.Equal(t, 503, a.status, "quarantine full: still 503, not kept")
	require.Zero(t, lost.count(hostID), "nothing acknowledged or queued")
	n, err := st.QuarantineCount(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)

	// The operator's view: what waits, without bodies or header values.
	a = lost.admin("GET", "/api/quarantine", nil)
	require.Equal(t, 200, a.status, string(a.body))
	var ql struct {
		Count    int               `json:"count"`
		Requests []quarantinedJSON `json:"requests"`
	}
	a.json(t, &ql)
	require.Equal(t, 3, ql.Count)
	require.Len(t, ql.Requests, 3)
	require.Equal(t, "github", ql.Requests[0].Source)
	require.Equal(t, len(prBody), ql.Requests[0].BodySize)
	require.Contains(t, ql.Requests[0].HeaderNames, "x-hub-signature-256")
	require.NotContains(t, string(a.body), "opened", "no bodies")
	require.NotContains(t, string(a.body), "sha256=", "no header values")
	require.Equal(t, 401, lost.do("GET", "/api/quarantine", nil, nil).status)
	require.Equal(t, 400, lost.admin("GET", "/api/quarantine?limit=0", nil).status)

	// Still the wrong key: a release pass (asked for by the operator) keeps everything.
	a = lost.admin("POST", "/api/quarantine/release", nil)
	require.Equal(t, 200, a.status, string(a.body))
	require.JSONEq(t, `{"admitted":0,"rejected":0,"held":3}`, string(a.body))
	res, err := lost.srv.ReleaseQuarantine(context.Background())
	require.NoError(t, err)
	require.Equal(t, intake.ReleaseResult{Held: 3}, res)

	// The right key is back, ten minutes later: verified as of arrival, queued.
	clock.Advance(10 * time.Minute)
	back := newEdge(t, st, ringOf(t, 1), clock, Config{})
	res, err = back.srv.ReleaseQuarantine(context.Background())
	require.NoError(t, err)
	require.Equal(t, intake.ReleaseResult{Admitted: 2, Rejected: 1}, res)
	n, err = st.QuarantineCount(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)

	ds, err := st.DeliveryList(context.Background(), &store.DeliveryListParams{HostID: hostID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	ids := []string{ds[0].ID, ds[1].ID}
	require.ElementsMatch(t, []string{
		"github:d-1:" + itoa(sent.UnixMilli()), "billing:evt_1:" + itoa(sent.UnixMilli()),
	}, ids, "ids and received times are those of arrival")
	d, err := st.DeliveryGet(context.Background(), hostID, "github:d-1:"+itoa(sent.UnixMilli()))
	require.NoError(t, err)
	require.Equal(t, prBody, d.RawBody, "byte-exact")
	events, err := st.DeliveryEventList(context.Background(), d.ID)
	require.NoError(t, err)
	require.Contains(t, events[0].Reason, "released from quarantine")

	rs := back.rejections(hostID)
	require.Len(t, rs, 1, "the forged one")
	require.Equal(t, 401, rs[0].Status)
	require.Contains(t, rs[0].Reason, "quarantined")

	// A provider's retry of the released event is a duplicate.
	a = back.sendGitHub(hostID, "d-1", prBody)
	var r shared.IntakeResponse
	a.json(t, &r)
	require.Equal(t, "duplicate", r.Status)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRekeyAndCanary(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clock := newClock()
	k1 := newEdge(t, st, ringOf(t, 1), clock, Config{})
	cs, err := intake.CheckCanary(ctx, st, ringOf(t, 1))
	require.NoError(t, err)
	require.Equal(t, intake.CanaryStatus{OK: true, Created: true, KeyID: ringOf(t, 1).SealingKeyID()}, cs)
	hostID, _ := k1.newHost("h")
	k1.addSource(hostID, "billing", map[string]any{"provider": "generic", "secrets": []string{"s1", "s2"}})
	require.Equal(t, 201, k1.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "https://ops.example.com/a"}).status)

	// Keys "2,1": everything still opens, but with the old key.
	r21 := ringOf(t, 2, 1)
	cs, err = intake.CheckCanary(ctx, st, r21)
	require.NoError(t, err)
	require.True(t, cs.OK)
	require.True(t, cs.Outdated)
	res, err := intake.Rekey(ctx, st, r21, clock.Now())
	require.NoError(t, err)
	require.Equal(t, intake.RekeyResult{Sources: 2, Rewritten: 2, Secrets: 3, Sinks: 1}, res)
	sinks, err := st.AlertSinkList(ctx)
	require.NoError(t, err)
	changed, err := alert.ResealSink(ringOf(t, 2), sinks[0])
	require.NoError(t, err, "the sink opens with the new key alone")
	require.False(t, changed)
	res, err = intake.Rekey(ctx, st, r21, clock.Now())
	require.NoError(t, err)
	require.Equal(t, intake.RekeyResult{Sources: 2}, res, "a second run has nothing to do")

	// Keys "2": every source verifies.
	k2 := newEdge(t, st, ringOf(t, 2), clock, Config{})
	cs, err = intake.CheckCanary(ctx, st, ringOf(t, 2))
	require.NoError(t, err)
	require.Equal(t, intake.CanaryStatus{OK: true, KeyID: ringOf(t, 2).SealingKeyID()}, cs)
	require.Equal(t, 200, k2.sendGitHub(hostID, "d-1", prBody).status)
	body := []byte(`{"n":1}`)
	require.Equal(t, 202, k2.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s2", "e1", body)).status)

	// An unrelated key: the canary says so, and rekey refuses to touch what it cannot open.
	r9 := ringOf(t, 9)
	cs, err = intake.CheckCanary(ctx, st, r9)
	require.NoError(t, err)
	require.False(t, cs.OK)
	require.Equal(t, ringOf(t, 2).SealingKeyID(), cs.KeyID)
	res, err = intake.Rekey(ctx, st, r9, clock.Now())
	require.NoError(t, err)
	require.Len(t, res.Failed, 3)
	require.Contains(t, res.Failed[2], "sink snk_")
	cs, err = intake.CheckCanary(ctx, st, ringOf(t, 2))
	require.NoError(t, err)
	require.True(t, cs.OK, "a failed rekey leaves the canary as it was")

	k9 := newEdge(t, st, r9, clock, Config{})
	require.NoError(t, k9.srv.ReportCanary(ctx))
	m := k9.admin("GET", "/metrics", nil)
	require.Contains(t, string(m.body), "relay_secret_keys_ok 0")
}

func stripeHeaders(secret string, ts int64, body []byte) map[string]string {
	t := strconv.FormatInt(ts, 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t + "."))
	m.Write(body)
	return map[string]string{"Content-Type": "application/json", "Stripe-Signature": "t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))}
}

func slackHeaders(secret string, ts int64, body []byte) map[string]string {
	t := strconv.FormatInt(ts, 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + t + ":"))
	m.Write(body)
	return map[string]string{"Content-Type": "application/json", "X-Slack-Request-Timestamp": t, "X-Slack-Signature": "v0=" + hex.EncodeToString(m.Sum(nil))}
}

// TestIntakeBadInputClasses: every class answers its status with the error
// shape, is audited, and stores nothing.
func TestIntakeBadInputClasses(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 100000})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "stripe", map[string]any{"secrets": []string{"whsec_abc"}})
	b.addSource(hostID, "slack", map[string]any{"secrets": []string{"slack-secret"}})
	b.addSource(hostID, "off", map[string]any{"provider": "stripe", "secrets": []string{"whsec_abc"}, "enabled": false})
	now := b.clock.Now().Unix()
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}` + "\n")
	slackBody := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`)

	cases := []struct {
		name    string
		source  string
		body    []byte
		headers map[string]string
		status  int
		code    string
	}{
		{"tampered body", "stripe", []byte(`{"id":"evt_1","type":"invoice.paid","x":1}` + "\n"), stripeHeaders("whsec_abc", now, body), 401, shared.CodeUnauthorized},
		{"wrong secret", "stripe", body, stripeHeaders("whsec_other", now, body), 401, shared.CodeUnauthorized},
		{"stale timestamp", "stripe", body, stripeHeaders("whsec_abc", now-301, body), 401, shared.CodeUnauthorized},
		{"future timestamp", "stripe", body, stripeHeaders("whsec_abc", now+301, body), 401, shared.CodeUnauthorized},
		{"missing header", "stripe", body, map[string]string{"Content-Type": "application/json"}, 401, shared.CodeUnauthorized},
		{"malformed header", "stripe", body, map[string]string{"Stripe-Signature": "t=abc,v1=zz"}, 401, shared.CodeUnauthorized},
		{"slack stale", "slack", slackBody, slackHeaders("slack-secret", now-301, slackBody), 401, shared.CodeUnauthorized},
		{"slack future", "slack", slackBody, slackHeaders("slack-secret", now+301, slackBody), 401, shared.CodeUnauthorized},
		{"slack missing timestamp", "slack", slackBody, map[string]string{"X-Slack-Signature": "v0=00"}, 401, shared.CodeUnauthorized},
		{"unknown source", "nope", body, stripeHeaders("whsec_abc", now, body), 404, shared.CodeNotFound},
		{"disabled source", "off", body, stripeHeaders("whsec_abc", now, body), 404, shared.CodeNotFound},
	}
	audited := 0
	for _, tc := range cases {
		a := b.do("POST", "/api/webhooks/"+hostID+"/"+tc.source, bytes.NewReader(tc.body), tc.headers)
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.body)
		require.Equal(t, tc.code, a.errCode(t), tc.name)
		if tc.status == 401 {
			audited++
			require.Len(t, b.rejections(hostID), audited, tc.name)
		}
	}
	require.Zero(t, b.count(hostID), "nothing stored")

	// Inside the window either way: accepted.
	a := b.do("POST", "/api/webhooks/"+hostID+"/stripe", bytes.NewReader(body), stripeHeaders("whsec_abc", now-299, body))
	require.Equal(t, 200, a.status, string(a.body))
	a = b.do("POST", "/api/webhooks/"+hostID+"/slack", bytes.NewReader(slackBody), slackHeaders("slack-secret", now+299, slackBody))
	require.Equal(t, 200, a.status, string(a.body))
	require.Equal(t, 2, b.count(hostID))
}

func TestSlackHandshakeAnsweredNotStored(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "slack", map[string]any{"secrets": []string{"slack-secret"}})
	body := []byte(`{"token":"t","challenge":"abc123","type":"url_verification"}`)
	a := b.do("POST", "/api/webhooks/"+hostID+"/slack", bytes.NewReader(body), slackHeaders("slack-secret", b.clock.Now().Unix(), body))
	require.Equal(t, 200, a.status)
	require.JSONEq(t, `{"challenge":"abc123"}`, string(a.body))
	// Unsigned, it is just a bad signature.
	a = b.do("POST", "/api/webhooks/"+hostID+"/slack", bytes.NewReader(body), slackHeaders("wrong", b.clock.Now().Unix(), body))
	require.Equal(t, 401, a.status)
	require.Zero(t, b.count(hostID))
}

func TestSourceSecretsAndOptionsChecked(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"discord", map[string]any{"secrets": []string{"not-a-public-key"}}, "secrets[0]"},
		{"standard", map[string]any{"secrets": []string{"whsec_%%%"}}, "secrets[0]"},
		{"github", map[string]any{"secrets": []string{"s"}, "options": map[string]string{"no_such_option": "1"}}, "options"},
		{"billing", map[string]any{"provider": "nope", "secrets": []string{"s"}}, "unknown provider"},
		{"slack", map[string]any{"secrets": []string{"s"}, "events": []string{"push", "pull request"}}, `events[1]: invalid event name \"pull request\"`},
		{"linear", map[string]any{"secrets": []string{"s"}, "events": []string{""}}, `events[0]: empty event name`},
		{"shopify", map[string]any{"secrets": []string{"s"}, "events": []string{strings.Repeat("e", 258)}}, "at most 257 characters"},
		{"telegram", map[string]any{"secrets": []string{"s"}, "events": []string{"é"}}, "invalid event name"},
		// A "*" within a name would match nothing: every webhook filtered.
		{"gitlab", map[string]any{"secrets": []string{"s"}, "events": []string{"pull_request.*"}}, `the only wildcard is \"*\" on its own`},
		{"stripe", map[string]any{"secrets": []string{"s"}, "events": []string{"a..b"}}, "invalid event name"},
	} {
		a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/"+tc.name, tc.body)
		require.Equal(t, 400, a.status, "%s: %s", tc.name, a.body)
		require.Equal(t, shared.CodeInvalid, a.errCode(t))
		require.Contains(t, string(a.body), tc.want, tc.name)
		require.NotContains(t, string(a.body), "not-a-public-key", "a secret is never echoed")
	}
	a := b.admin("GET", "/api/hosts/"+hostID+"/sources", nil)
	require.NotContains(t, string(a.body), `"name":"discord"`, "nothing stored")

	// Event names as a filter takes them (shared.CheckEventFilter), as the
	// host's configuration does.
	good := []string{"push", "pull_request.opened", "invoice:paid", "*", "a-b", "orders/create", strings.Repeat("E", 128) + "." + strings.Repeat("a", 128)}
	a = b.admin("PUT", "/api/hosts/"+hostID+"/sources/github-events", map[string]any{"provider": "github", "secrets": []string{"s"}, "events": good})
	require.Equal(t, 201, a.status, "%s", a.body)
}

// A nack names the attempt it reports; one for another attempt is stale and
// changes nothing.
func TestHeartbeatNackOfAnotherAttemptIsIgnored(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	w := b.leaseOne(hostID, token, "d-1")
	id := w.DeliveryID
	require.Equal(t, 1, w.Attempt)

	stale := shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: id, Error: "x", Retryable: true, Attempt: 7}}}
	require.Equal(t, 200, b.heartbeat(token, stale).status)
	d, err := b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, d.Status, "a nack of another attempt changes nothing")

	current := shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: id, Error: "busy", Retryable: true, Attempt: 1}}}
	require.Equal(t, 200, b.heartbeat(token, current).status)
	d, err = b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusRetrying, d.Status)
	require.Equal(t, "busy", d.LastError)
}

// Token schemes send the secret itself: it is checked, then neither stored,
// shown by the admin API, nor handed to the host.
func TestTokenHeadersStayInTheCloud(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, token := b.newHost("h")
	b.addSource(hostID, "gitlab", map[string]any{"secrets": []string{"gl-token-123"}})
	b.addSource(hostID, "internal", map[string]any{"provider": "generic", "secrets": []string{"shared-456"},
		"options": map[string]string{"mode": "token", "signature_header": "X-Api-Key"}})
	body := []byte(`{"object_kind":"push"}`)
	a := b.do("POST", "/api/webhooks/"+hostID+"/gitlab", bytes.NewReader(body),
		map[string]string{"X-Gitlab-Token": "gl-token-123", "X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "u-1"})
	require.Equal(t, 200, a.status, string(a.body))
	a = b.do("POST", "/api/webhooks/"+hostID+"/internal", bytes.NewReader(body),
		map[string]string{"X-Api-Key": "shared-456", "X-Event-Id": "e-1"})
	require.Equal(t, 202, a.status, string(a.body))

	ds, err := b.store.DeliveryList(context.Background(), &store.DeliveryListParams{HostID: hostID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	for _, d := range ds {
		got := b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+d.ID, nil)
		require.Equal(t, 200, got.status)
		require.NotContains(t, string(got.body), "gl-token-123")
		require.NotContains(t, string(got.body), "shared-456")
	}
	hb := b.heartbeat(token, shared.HeartbeatRequest{})
	require.Equal(t, 200, hb.status)
	require.NotContains(t, string(hb.body), "gl-token-123")
	require.NotContains(t, string(hb.body), "shared-456")
	require.Contains(t, string(hb.body), "x-gitlab-event", "the provider's other headers go through")
}

func TestSlackRetryRecordedInTheAuditTrail(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "slack", map[string]any{"secrets": []string{"slack-secret"}})
	body := []byte(`{"type":"event_callback","event_id":"Ev9","event":{"type":"app_mention"}}`)
	h := slackHeaders("slack-secret", b.clock.Now().Unix(), body)
	h["X-Slack-Retry-Num"], h["X-Slack-Retry-Reason"] = "2", "http_timeout"
	a := b.do("POST", "/api/webhooks/"+hostID+"/slack", bytes.NewReader(body), h)
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	events, err := b.store.DeliveryEventList(context.Background(), r.DeliveryID)
	require.NoError(t, err)
	require.Contains(t, events[0].Reason, "slack retry 2 (http_timeout)")
	d, err := b.store.DeliveryGet(context.Background(), hostID, r.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, "2", d.Headers["x-slack-retry-num"], "and kept with the provider's headers")
}

// X-Forwarded-For names the client only when the peer is a trusted proxy;
// otherwise a sender could write any address into the audit.
func TestRejectionClientIPTrustsOnlyConfiguredProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []string
		want    string
	}{
		{"no proxy trusted", nil, "127.0.0.1"},
		{"loopback proxy trusted", []string{"127.0.0.1"}, "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{TrustedProxies: tc.proxies})
			hostID, _ := b.newHost("h")
			h := ghHeaders("wrong", "d-1", prBody)
			h["X-Forwarded-For"] = "203.0.113.9"
			require.Equal(t, 401, b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h).status)
			rs := b.rejections(hostID)
			require.Len(t, rs, 1)
			require.Equal(t, tc.want, rs[0].ClientIP)
		})
	}
}

// Over the limit, a retrying provider's request is refused before its body
// is read: an endless streamed body gets the 429, not a 413 after reading.
func TestRateLimitedBodyIsNotRead(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 60, RateLimitBurst: 1})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "billing", map[string]any{"provider": "generic", "secrets": []string{"s"}, "max_body_bytes": 4096})
	body := []byte(`{"n":1}`)
	require.Equal(t, 202, b.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s", "e1", body)).status)

	req, _ := http.NewRequest("POST", b.bundle.srv.URL+"/api/webhooks/"+hostID+"/billing", &endless{})
	req.ContentLength = -1
	resp, err := b.bundle.srv.Client().Do(req)
	if err == nil {
		defer resp.Body.Close()
		require.Equal(t, 429, resp.StatusCode)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	}
	rs := b.rejections(hostID)
	require.Len(t, rs, 1)
	require.Equal(t, 429, rs[0].Status, "refused for the rate, not after reading 4 KiB of body")
}
