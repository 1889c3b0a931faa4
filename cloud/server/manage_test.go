package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// snapshot is everything the store holds about hosts and their deliveries,
// to show that a refused request changed nothing.
func (b *bundle) snapshot() string {
	b.t.Helper()
	ctx := context.Background()
	hosts, err := b.store.HostList(ctx)
	require.NoError(b.t, err)
	type deliveryState struct {
		Delivery *store.Delivery
		Events   []*store.DeliveryEvent
	}
	state := map[string]any{"hosts": hosts}
	for _, h := range hosts {
		srcs, err := b.store.SourceList(ctx, h.ID)
		require.NoError(b.t, err)
		ds, err := b.store.DeliveryList(ctx, &store.DeliveryListParams{HostID: h.ID, Limit: 1000})
		require.NoError(b.t, err)
		var dss []deliveryState
		for _, d := range ds {
			evs, err := b.store.DeliveryEventList(ctx, d.ID)
			require.NoError(b.t, err)
			dss = append(dss, deliveryState{d, evs})
		}
		state[h.ID] = map[string]any{"sources": srcs, "deliveries": dss}
	}
	out, err := json.Marshal(state)
	require.NoError(b.t, err)
	return string(out)
}

// refused sends a request that must fail with status and code, with an
// error message, and change nothing.
func (b *bundle) refused(method, path string, body any, status int, code string) answer {
	b.t.Helper()
	before := b.snapshot()
	var a answer
	switch v := body.(type) {
	case nil:
		a = b.admin(method, path, nil)
	case string: // raw, possibly malformed
		a = b.do(method, path, strings.NewReader(v), map[string]string{"Authorization": "Bearer " + testAdmin})
	default:
		a = b.admin(method, path, v)
	}
	require.Equal(b.t, status, a.status, "%s %s %v: %s", method, path, body, a.body)
	require.Equal(b.t, code, a.errCode(b.t), "%s %s", method, path)
	require.Equal(b.t, before, b.snapshot(), "%s %s %v changed something", method, path, body)
	return a
}

// leaseAll heartbeats once and returns the delivery ids handed out.
func (b *bundle) leaseAll(token string, req shared.HeartbeatRequest) []string {
	b.t.Helper()
	a := b.heartbeat(token, req)
	require.Equal(b.t, 200, a.status, string(a.body))
	var hb shared.HeartbeatResponse
	a.json(b.t, &hb)
	var ids []string
	for _, w := range hb.Webhooks {
		ids = append(ids, w.DeliveryID)
	}
	return ids
}

// leaseOne sends a GitHub webhook, and leases it with a heartbeat that must
// hand out that one alone.
func (b *bundle) leaseOne(hostID, token, event string) shared.Webhook {
	b.t.Helper()
	require.Equal(b.t, 200, b.sendGitHub(hostID, event, prBody).status)
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(b.t, &hb)
	require.Len(b.t, hb.Webhooks, 1)
	return hb.Webhooks[0]
}

// deadLetter sends a webhook and has the host nack it as not retryable.
func (b *bundle) deadLetter(hostID, token, event string) string {
	b.t.Helper()
	a := b.sendGitHub(hostID, event, prBody)
	require.Equal(b.t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(b.t, &r)
	require.Contains(b.t, b.leaseAll(token, shared.HeartbeatRequest{}), r.DeliveryID)
	b.leaseAll(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0),
		WebhookNacks: []shared.Nack{{DeliveryID: r.DeliveryID, Error: "400 from the handler", Retryable: false}}})
	d, err := b.store.DeliveryGet(context.Background(), hostID, r.DeliveryID)
	require.NoError(b.t, err)
	require.Equal(b.t, store.StatusDLQ, d.Status)
	return r.DeliveryID
}

func TestManagementRequiresTheAdminToken(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	routes := [][2]string{
		{"GET", "/api/hosts"}, {"POST", "/api/hosts"}, {"GET", "/api/hosts/" + hostID},
		{"PATCH", "/api/hosts/" + hostID}, {"POST", "/api/hosts/" + hostID + "/deactivate"},
		{"POST", "/api/hosts/" + hostID + "/claim-code"}, {"GET", "/api/hosts/" + hostID + "/sources"},
		{"PUT", "/api/hosts/" + hostID + "/sources/github"}, {"GET", "/api/hosts/" + hostID + "/sources/github"},
		{"GET", "/api/hosts/" + hostID + "/webhooks"}, {"GET", "/api/hosts/" + hostID + "/webhooks/github:x:1"},
		{"POST", "/api/hosts/" + hostID + "/webhooks/github:x:1/retry"}, {"DELETE", "/api/hosts/" + hostID + "/webhooks/dlq"},
		{"GET", "/api/hosts/" + hostID + "/rejections"}, {"GET", "/metrics"},
		{"GET", "/api/quarantine"}, {"POST", "/api/quarantine/release"},
	}
	for _, r := range routes {
		for name, hdr := range map[string]map[string]string{
			"no token":    nil,
			"wrong token": {"Authorization": "Bearer not-the-admin-token"},
			"not bearer":  {"Authorization": "Basic " + testAdmin},
		} {
			// One failed login's worth of the default 10 a minute: the
			// client stays within its limit (see TestAuthFailuresThrottled).
			b.clock.Advance(6 * time.Second)
			before := b.snapshot()
			a := b.do(r[0], r[1], strings.NewReader(`{"name":"x"}`), hdr)
			require.Equal(t, 401, a.status, "%s %s, %s", r[0], r[1], name)
			require.Equal(t, shared.CodeUnauthorized, a.errCode(t))
			require.Equal(t, `Bearer realm="relay-admin"`, a.header.Get("WWW-Authenticate"))
			require.Equal(t, before, b.snapshot(), "%s %s, %s", r[0], r[1], name)
		}
	}
}

func TestManagementHosts(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("build-box")
	b.clock.Advance(time.Millisecond) // hosts list oldest first
	otherID, _ := b.newHost("idle")
	for i := range 3 {
		require.Equal(t, 200, b.sendGitHub(hostID, fmt.Sprintf("d-%d", i), prBody).status)
	}
	b.clock.Advance(time.Second)
	leased := b.leaseAll(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(2)})
	require.Len(t, leased, 2)
	b.leaseAll(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookAcks: leased[:1]})
	heartbeatAt := b.clock.Now().UTC()

	// The list: status, last heartbeat and counts by state for every host.
	var list struct {
		Hosts []hostJSON `json:"hosts"`
	}
	a := b.admin("GET", "/api/hosts", nil)
	require.Equal(t, 200, a.status)
	a.json(t, &list)
	require.Len(t, list.Hosts, 2)
	h := list.Hosts[0]
	require.Equal(t, hostID, h.ID)
	require.Equal(t, store.HostActive, h.Status)
	require.Equal(t, heartbeatAt, h.LastHeartbeatAt.UTC())
	require.Equal(t, map[store.Status]int{
		store.StatusQueued: 1, store.StatusDelivering: 0, store.StatusDelivered: 1,
		store.StatusAcked: 1, store.StatusRetrying: 0, store.StatusDLQ: 0,
	}, h.Counts)
	require.Equal(t, otherID, list.Hosts[1].ID)
	require.Nil(t, list.Hosts[1].LastHeartbeatAt)
	require.Len(t, list.Hosts[1].Counts, len(store.Statuses), "zeros included")

	// One host.
	var one hostJSON
	a = b.admin("GET", "/api/hosts/"+hostID, nil)
	require.Equal(t, 200, a.status)
	a.json(t, &one)
	require.Equal(t, h, one)
	b.refused("GET", "/api/hosts/h_nope", nil, 404, shared.CodeNotFound)

	// PATCH: partial updates, each field alone and together.
	a = b.admin("PATCH", "/api/hosts/"+hostID, map[string]any{"name": "  renamed  "})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &one)
	require.Equal(t, "renamed", one.Name)
	require.Equal(t, h.RateLimitPerMin, one.RateLimitPerMin, "untouched")
	require.Equal(t, h.Counts, one.Counts)
	a = b.admin("PATCH", "/api/hosts/"+hostID, map[string]any{"rate_limit_per_min": 600})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &one)
	require.Equal(t, "renamed", one.Name)
	require.Equal(t, 600, one.RateLimitPerMin)
	require.Equal(t, h.RateLimitBurst, one.RateLimitBurst)
	a = b.admin("PATCH", "/api/hosts/"+hostID, map[string]any{"rate_limit_burst": 40, "rate_limit_per_min": 0, "name": "box"})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &one)
	require.Equal(t, []any{"box", 0, 40}, []any{one.Name, one.RateLimitPerMin, one.RateLimitBurst})
	stored, err := b.store.HostGet(context.Background(), hostID)
	require.NoError(t, err)
	require.Equal(t, []any{"box", 0, 40}, []any{stored.Name, stored.RateLimitPerMin, stored.RateLimitBurst})

	for name, body := range map[string]any{
		"empty object":     map[string]any{},
		"unknown field":    map[string]any{"name": "x", "status": "deactivated"},
		"empty name":       map[string]any{"name": "   "},
		"long name":        map[string]any{"name": strings.Repeat("n", 201)},
		"name not string":  map[string]any{"name": 5},
		"null name":        `{"name": null}`,
		"negative rate":    map[string]any{"rate_limit_per_min": -1},
		"fractional rate":  map[string]any{"rate_limit_per_min": 1.5},
		"rate as string":   map[string]any{"rate_limit_burst": "10"},
		"rate too large":   map[string]any{"rate_limit_burst": maxRateLimit + 1},
		"null rate":        `{"rate_limit_per_min": null}`,
		"malformed":        `{"name": "x"`,
		"array":            `["name"]`,
		"null":             `null`,
		"empty body":       ``,
		"trailing garbage": `{"name": "x"} {}`,
	} {
		a := b.refused("PATCH", "/api/hosts/"+hostID, body, 400, shared.CodeInvalid)
		require.NotEmpty(t, a.body, name)
	}
	b.refused("PATCH", "/api/hosts/h_nope", map[string]any{"name": "x"}, 404, shared.CodeNotFound)

	// A new claim code replaces the old one and claims the host once.
	var code shared.CreateHostResponse
	a = b.admin("POST", "/api/hosts/"+otherID+"/claim-code", nil)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &code)
	require.Equal(t, otherID, code.ID)
	require.Equal(t, b.clock.Now().Add(24*time.Hour).UTC().Truncate(time.Millisecond), code.ClaimExpiresAt.UTC())
	claim := func() int {
		return b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: code.ClaimCode}), nil).status
	}
	require.Equal(t, 200, claim())
	require.Equal(t, 401, claim(), "one time")
	b.refused("POST", "/api/hosts/h_nope/claim-code", nil, 404, shared.CodeNotFound)

	// Deactivating revokes the host's tokens at once and closes its intake.
	require.Equal(t, 200, b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0)}).status)
	a = b.admin("POST", "/api/hosts/"+hostID+"/deactivate", nil)
	require.Equal(t, 200, a.status)
	a.json(t, &one)
	require.Equal(t, store.HostDeactivated, one.Status)
	require.NotNil(t, one.DeactivatedAt)
	require.Equal(t, h.Counts, one.Counts, "its deliveries are kept")
	hb := b.heartbeat(token, shared.HeartbeatRequest{})
	require.Equal(t, 401, hb.status)
	require.Equal(t, shared.CodeUnauthorized, hb.errCode(t))
	in := b.sendGitHub(hostID, "d-after", prBody)
	require.Equal(t, 410, in.status)
	require.Equal(t, shared.CodeGone, in.errCode(t))
	b.refused("POST", "/api/hosts/"+hostID+"/claim-code", nil, 410, shared.CodeGone)
	b.refused("POST", "/api/hosts/h_nope/deactivate", nil, 404, shared.CodeNotFound)
}

func TestManagementSourceRetrySchedule(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	path := "/api/hosts/" + hostID + "/sources/github"

	var src shared.Source
	b.admin("GET", path, nil).json(t, &src)
	require.Equal(t, []float64{0, 30, 120, 600, 3600}, src.RetrySchedule, "the default, shown")
	require.Equal(t, 5, src.MaxAttempts)

	a := b.admin("PUT", path, map[string]any{"retry_schedule_s": []float64{0, 1.5, 60}, "max_attempts": 4})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &src)
	require.Equal(t, []float64{0, 1.5, 60}, src.RetrySchedule)
	require.Equal(t, 4, src.MaxAttempts)
	stored, err := b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 1500 * time.Millisecond, time.Minute}, stored.RetryDelays)
	require.Len(t, stored.Secrets, 1, "secrets kept when omitted")

	a = b.admin("PUT", path, map[string]any{"retry_schedule_s": []float64{0, 10, 20}})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &src)
	require.Equal(t, 3, src.MaxAttempts, "one attempt per entry")

	for name, body := range map[string]any{
		"negative delay":     map[string]any{"retry_schedule_s": []float64{0, -1}},
		"first not 0":        map[string]any{"retry_schedule_s": []float64{5, 10}},
		"too many entries":   map[string]any{"retry_schedule_s": make([]float64, 21)},
		"delay over a week":  map[string]any{"retry_schedule_s": []float64{0, 7*24*3600 + 1}},
		"max attempts 51":    map[string]any{"max_attempts": 51},
		"max attempts -1":    map[string]any{"max_attempts": -1},
		"schedule not array": map[string]any{"retry_schedule_s": "0,30"},
	} {
		a := b.refused("PUT", path, body, 400, shared.CodeInvalid)
		require.NotEmpty(t, a.body, name)
	}

	// A schedule of 20 and 50 attempts are the bounds.
	a = b.admin("PUT", path, map[string]any{"retry_schedule_s": make([]float64, 20), "max_attempts": 50})
	require.Equal(t, 200, a.status, string(a.body))
	// Omitted: the default again.
	a = b.admin("PUT", path, map[string]any{})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &src)
	require.Equal(t, []float64{0, 30, 120, 600, 3600}, src.RetrySchedule)
	stored, err = b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Nil(t, stored.RetryDelays)
}

func TestManagementDeliveries(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	otherID, otherToken := b.newHost("other")
	var sent []string
	for i := range 4 {
		a := b.sendGitHub(hostID, fmt.Sprintf("d-%d", i), prBody)
		require.Equal(t, 200, a.status, string(a.body))
		var r shared.IntakeResponse
		a.json(t, &r)
		sent = append(sent, r.DeliveryID)
		b.clock.Advance(time.Millisecond)
	}
	otherDead := b.deadLetter(otherID, otherToken, "o-1")
	dead := b.deadLetter(hostID, token, "d-dead") // leases d-0..d-3 too
	b.leaseAll(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookAcks: sent[:1],
		WebhookNacks: []shared.Nack{{DeliveryID: sent[1], Error: "503", Retryable: true}}})
	acked, retrying := sent[0], sent[1]

	type page struct {
		Webhooks   []shared.Delivery `json:"webhooks"`
		NextCursor string            `json:"next_cursor"`
	}
	list := func(q string) page {
		t.Helper()
		a := b.admin("GET", "/api/hosts/"+hostID+"/webhooks"+q, nil)
		require.Equal(t, 200, a.status, string(a.body))
		var p page
		a.json(t, &p)
		return p
	}

	// Filters and exact paging: five deliveries in pages of 2, 2, 1.
	var paged []string
	p := list("?limit=2")
	for {
		for _, d := range p.Webhooks {
			paged = append(paged, d.DeliveryID)
			require.Nil(t, d.RawBody, "no bodies in lists")
		}
		if p.NextCursor == "" {
			break
		}
		p = list("?limit=2&cursor=" + url.QueryEscape(p.NextCursor))
	}
	require.Equal(t, []string{dead, sent[3], sent[2], sent[1], sent[0]}, paged, "newest first, no gaps or overlaps")
	p = list("?limit=5")
	require.Len(t, p.Webhooks, 5)
	require.Empty(t, p.NextCursor, "no cursor when nothing follows")
	p = list("?status=dlq")
	require.Len(t, p.Webhooks, 1)
	require.Equal(t, dead, p.Webhooks[0].DeliveryID)
	require.Equal(t, "400 from the handler", p.Webhooks[0].LastError)
	require.NotNil(t, p.Webhooks[0].DLQAt)
	p = list("?status=retrying&source=github")
	require.Equal(t, retrying, p.Webhooks[0].DeliveryID)
	require.NotNil(t, p.Webhooks[0].NextRetryAt)
	require.Empty(t, list("?source=stripe").Webhooks)

	for _, q := range []string{"status=done", "status=DLQ", "cursor=!!!", "cursor=" + url.QueryEscape("bm90IGEgY3Vyc29y"), "limit=0", "limit=-1", "limit=501", "limit=ten"} {
		b.refused("GET", "/api/hosts/"+hostID+"/webhooks?"+q, nil, 400, shared.CodeInvalid)
	}
	b.refused("GET", "/api/hosts/h_nope/webhooks", nil, 404, shared.CodeNotFound)

	// One delivery: its fields, body and audit trail.
	var one struct {
		Delivery shared.Delivery `json:"delivery"`
		Events   []eventJSON     `json:"events"`
	}
	a := b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+dead, nil)
	require.Equal(t, 200, a.status)
	a.json(t, &one)
	require.Equal(t, prBody, one.Delivery.RawBody)
	require.Equal(t, string(store.StatusDLQ), one.Delivery.Status)
	require.Equal(t, 1, one.Delivery.Attempts)
	require.Equal(t, 5, one.Delivery.MaxAttempts)
	var trail []string
	for _, e := range one.Events {
		trail = append(trail, fmt.Sprintf("%s>%s#%d", e.From, e.To, e.Attempt))
	}
	require.Equal(t, []string{">queued#0", "queued>delivering#1", "delivering>delivered#1", "delivered>dlq#1"}, trail)
	b.refused("GET", "/api/hosts/"+hostID+"/webhooks/github:nope:1", nil, 404, shared.CodeNotFound)
	b.refused("GET", "/api/hosts/"+hostID+"/webhooks/"+otherDead, nil, 404, shared.CodeNotFound)
	b.refused("GET", "/api/hosts/h_nope/webhooks/"+dead, nil, 404, shared.CodeNotFound)

	// Manual retry: from dlq and from retrying, attempts reset.
	retry := func(id string) shared.Delivery {
		t.Helper()
		a := b.admin("POST", "/api/hosts/"+hostID+"/webhooks/"+id+"/retry", nil)
		require.Equal(t, 200, a.status, string(a.body))
		var r struct {
			Delivery shared.Delivery `json:"delivery"`
		}
		a.json(t, &r)
		return r.Delivery
	}
	b.clock.Advance(time.Second)
	d := retry(dead)
	require.Equal(t, string(store.StatusQueued), d.Status)
	require.Zero(t, d.Attempts)
	require.Nil(t, d.DLQAt)
	b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+dead, nil).json(t, &one)
	last := one.Events[len(one.Events)-1]
	require.Equal(t, eventJSON{At: b.clock.Now().UTC().Truncate(time.Millisecond), From: store.StatusDLQ, To: store.StatusQueued,
		Reason: store.TransitionRetry.Reason, Attempt: 0}, eventJSON{At: last.At.UTC(), From: last.From, To: last.To, Reason: last.Reason, Attempt: last.Attempt})
	d = retry(retrying)
	require.Equal(t, string(store.StatusQueued), d.Status)
	require.Nil(t, d.NextRetryAt)
	// Both are handed out on the next heartbeat, as first attempts.
	a = b.heartbeat(token, shared.HeartbeatRequest{})
	var hb shared.HeartbeatResponse
	a.json(t, &hb)
	require.Len(t, hb.Webhooks, 2)
	for _, w := range hb.Webhooks {
		require.Contains(t, []string{dead, retrying}, w.DeliveryID)
		require.Equal(t, 1, w.Attempt)
	}

	// From any other state: 409 with a clear message, and nothing changes.
	a = b.refused("POST", "/api/hosts/"+hostID+"/webhooks/"+acked+"/retry", nil, 409, shared.CodeConflict)
	var e shared.ErrorResponse
	a.json(t, &e)
	require.Equal(t, "delivery is acked: only a dead-lettered (dlq) or retrying delivery can be retried", e.Error.Message)
	b.refused("POST", "/api/hosts/"+hostID+"/webhooks/"+dead+"/retry", nil, 409, shared.CodeConflict) // delivered now
	b.refused("POST", "/api/hosts/"+hostID+"/webhooks/github:nope:1/retry", nil, 404, shared.CodeNotFound)
	b.refused("POST", "/api/hosts/"+hostID+"/webhooks/"+otherDead+"/retry", nil, 404, shared.CodeNotFound)
	b.refused("POST", "/api/hosts/h_nope/webhooks/"+dead+"/retry", nil, 404, shared.CodeNotFound)

	// DLQ purge: answers how many, only the host's dead letters.
	dead2 := b.deadLetter(hostID, token, "d-dead-2")
	dead3 := b.deadLetter(hostID, token, "d-dead-3")
	before := b.count(hostID)
	a = b.admin("DELETE", "/api/hosts/"+hostID+"/webhooks/dlq", nil)
	require.Equal(t, 200, a.status, string(a.body))
	require.JSONEq(t, `{"purged": 2}`, string(a.body))
	require.Equal(t, before-2, b.count(hostID))
	for _, id := range []string{dead2, dead3} {
		b.refused("GET", "/api/hosts/"+hostID+"/webhooks/"+id, nil, 404, shared.CodeNotFound)
	}
	a = b.admin("DELETE", "/api/hosts/"+hostID+"/webhooks/dlq", nil)
	require.Equal(t, 200, a.status)
	require.JSONEq(t, `{"purged": 0}`, string(a.body))
	other, err := b.store.DeliveryGet(context.Background(), otherID, otherDead)
	require.NoError(t, err)
	require.Equal(t, store.StatusDLQ, other.Status, "another host's dead letter stays")
	b.refused("DELETE", "/api/hosts/h_nope/webhooks/dlq", nil, 404, shared.CodeNotFound)
	// GET of the DLQ path is a delivery lookup, not the purge.
	b.refused("GET", "/api/hosts/"+otherID+"/webhooks/dlq", nil, 404, shared.CodeNotFound)
}
