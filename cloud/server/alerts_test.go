package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relaykit/relay/cloud/alert"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// Hosts show their presence, filtered by it, and one host its history.
func TestHostPresence(t *testing.T) {
	b := setup(t)
	online, token := b.newHost("online")
	quiet, _ := b.newHost("quiet")
	var created shared.CreateHostResponse
	b.admin("POST", "/api/hosts", map[string]string{"name": "unclaimed"}).json(t, &created)

	b.clock.Advance(2 * time.Minute)
	require.Equal(t, 200, b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0)}).status)
	list := func(query string) map[string]string {
		var out struct{ Hosts []hostJSON }
		a := b.admin("GET", "/api/hosts"+query, nil)
		require.Equal(t, 200, a.status, string(a.body))
		a.json(t, &out)
		got := map[string]string{}
		for _, h := range out.Hosts {
			got[h.Name] = string(h.Presence)
		}
		return got
	}
	require.Equal(t, map[string]string{"online": "online", "quiet": "late", "unclaimed": ""}, list(""))
	b.clock.Advance(2 * time.Minute)
	require.Equal(t, map[string]string{"quiet": "offline"}, list("?presence=offline"))
	require.Equal(t, map[string]string{"online": "late"}, list("?presence=late"))
	b.refused("GET", "/api/hosts?presence=gone", nil, 400, shared.CodeInvalid)

	// The history the evaluator records shows on the host.
	ctx := context.Background()
	now := b.clock.Now()
	_, err := b.store.PresenceSet(ctx, &store.PresenceSetParams{Now: now.Add(-4 * time.Minute),
		Changes: []store.PresenceMove{{HostID: quiet, To: store.PresenceOnline}}})
	require.NoError(t, err)
	_, err = b.store.PresenceSet(ctx, &store.PresenceSetParams{Now: now,
		Changes: []store.PresenceMove{{HostID: quiet, From: store.PresenceOnline, To: store.PresenceOffline}}})
	require.NoError(t, err)
	var h hostJSON
	b.admin("GET", "/api/hosts/"+quiet, nil).json(t, &h)
	require.Equal(t, store.PresenceOffline, h.Presence)
	require.Len(t, h.PresenceHistory, 2)
	require.Equal(t, presenceEventJSON{At: now.UTC(), From: store.PresenceOnline, To: store.PresenceOffline, LastedS: 240}, h.PresenceHistory[0])
	_ = online
}

// The host list comes a page at a time, oldest first, and a presence
// filter reads on through the hosts until its page is full.
func TestHostListPages(t *testing.T) {
	b := setup(t)
	tokens := map[string]string{}
	for i := range 7 {
		b.clock.Advance(time.Millisecond)
		id, token := b.newHost(fmt.Sprintf("host %d", i))
		tokens[id] = token
	}
	twin, token := b.newHost("twin") // created in the same millisecond as host 6: told apart by id
	tokens[twin] = token
	type page struct {
		Hosts      []hostJSON `json:"hosts"`
		NextCursor string     `json:"next_cursor"`
	}
	get := func(query string) page {
		t.Helper()
		var out page
		a := b.admin("GET", "/api/hosts"+query, nil)
		require.Equal(t, 200, a.status, string(a.body))
		a.json(t, &out)
		return out
	}
	ids := func(hs []hostJSON) (out []string) {
		for _, h := range hs {
			out = append(out, h.ID)
		}
		return out
	}
	all := get("")
	require.Len(t, all.Hosts, 8)
	require.Empty(t, all.NextCursor, "the last page")
	walk := func(query string) (got []string, pages int) {
		t.Helper()
		p := get(query)
		for {
			got, pages = append(got, ids(p.Hosts)...), pages+1
			if p.NextCursor == "" {
				return got, pages
			}
			p = get(query + "&cursor=" + p.NextCursor)
		}
	}
	got, pages := walk("?limit=3")
	require.Equal(t, ids(all.Hosts), got)
	require.Equal(t, 3, pages)
	got, pages = walk("?limit=8")
	require.Equal(t, ids(all.Hosts), got)
	require.Equal(t, 1, pages, "no empty page after a full one")

	// Two hosts heartbeat; the others go late. A page of one online host
	// skips the late ones before and between.
	b.clock.Advance(2 * time.Minute)
	online := []string{all.Hosts[3].ID, all.Hosts[6].ID}
	for _, id := range online {
		require.Equal(t, 200, b.heartbeat(tokens[id], shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0)}).status)
	}
	got, pages = walk("?presence=online&limit=1")
	require.Equal(t, online, got)
	require.Equal(t, 2, pages)
	got, pages = walk("?presence=late&limit=3")
	require.Len(t, got, 6)
	require.Equal(t, 2, pages)

	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x", "?cursor=not-a-cursor", "?cursor=bm9wZQ"} {
		b.refused("GET", "/api/hosts"+q, nil, 400, shared.CodeInvalid)
	}
}

func TestAlertsAPI(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("one")

	// Sinks: a webhook sink's secret is shown once; a URL is never shown.
	var sink shared.AlertSink
	a := b.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "https://hooks.example.com/relay?token=abc"})
	require.Equal(t, 201, a.status, string(a.body))
	a.json(t, &sink)
	require.Regexp(t, `^whsec_`, sink.Secret)
	require.Equal(t, "https://hooks.example.com", sink.Target)
	a = b.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "slack", "url": "https://hooks.slack.com/services/T/B/secret"})
	require.Equal(t, 201, a.status, string(a.body))
	a = b.admin("GET", "/api/alerts/sinks", nil)
	require.Equal(t, 200, a.status)
	require.NotContains(t, string(a.body), "whsec_")
	require.NotContains(t, string(a.body), "secret")
	require.NotContains(t, string(a.body), "token=abc")
	var sinks struct{ Sinks []shared.AlertSink }
	a.json(t, &sinks)
	require.Len(t, sinks.Sinks, 2)
	b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "pager", "url": "https://x"}, 400, shared.CodeInvalid)
	b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "ftp://x"}, 400, shared.CodeInvalid)
	b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "https://u:p@x"}, 400, shared.CodeInvalid)
	require.Equal(t, 204, b.admin("DELETE", "/api/alerts/sinks/"+sink.ID, nil).status)
	b.refused("DELETE", "/api/alerts/sinks/"+sink.ID, nil, 404, shared.CodeNotFound)

	// Rules: defaults, every host's setting and one host's.
	a = b.admin("PUT", "/api/alerts/rules/oldest_pending", map[string]any{"threshold": 600})
	require.Equal(t, 200, a.status, string(a.body))
	a = b.admin("PUT", "/api/hosts/"+hostID+"/alert-rules/host_offline", map[string]any{"disabled": true})
	require.Equal(t, 200, a.status, string(a.body))
	b.refused("PUT", "/api/hosts/"+hostID+"/alert-rules/quarantine_not_empty", map[string]any{"disabled": true}, 400, shared.CodeInvalid)
	b.refused("PUT", "/api/hosts/h_nope/alert-rules/host_offline", map[string]any{"disabled": true}, 404, shared.CodeNotFound)
	b.refused("PUT", "/api/alerts/rules/nope", map[string]any{"disabled": true}, 404, shared.CodeNotFound)
	b.refused("PUT", "/api/alerts/rules/secret_keys", map[string]any{"threshold": 3}, 400, shared.CodeInvalid)
	b.refused("PUT", "/api/alerts/rules/oldest_pending", map[string]any{"threshold": -1}, 400, shared.CodeInvalid)
	var rules struct{ Rules []ruleJSON }
	b.admin("GET", "/api/alerts/rules", nil).json(t, &rules)
	byName := map[string]ruleJSON{}
	for _, r := range rules.Rules {
		byName[r.Name] = r
	}
	require.Len(t, byName, len(alert.Rules), "every built-in rule")
	require.Equal(t, int64(900), byName["oldest_pending"].DefaultThreshold)
	require.Equal(t, "seconds", byName["oldest_pending"].Unit)
	require.Equal(t, int64(600), *byName["oldest_pending"].Settings[0].Threshold)
	require.Equal(t, []ruleSettingJSON{{HostID: hostID, Disabled: true}}, byName["host_offline"].Settings)
	require.Equal(t, 204, b.admin("DELETE", "/api/hosts/"+hostID+"/alert-rules/host_offline", nil).status)
	b.admin("GET", "/api/alerts/rules", nil).json(t, &rules)
	for _, r := range rules.Rules {
		if r.Name == "host_offline" {
			require.Empty(t, r.Settings)
		}
	}

	// Alerts: firing and history, paged.
	ctx := context.Background()
	payload := func(*store.Alert) ([]byte, error) { return []byte(`{}`), nil }
	now := b.clock.Now()
	for _, key := range []string{"host:a", "host:b", "host:c"} {
		_, err := b.store.AlertFire(ctx, []*store.AlertFireParams{{Rule: "host_offline", Key: key, Summary: "offline " + key, Payload: payload, Now: now}})
		require.NoError(t, err)
	}
	var resp struct {
		Firing, History []shared.Alert
		NextCursor      string `json:"next_cursor"`
	}
	b.admin("GET", "/api/alerts?limit=2", nil).json(t, &resp)
	require.Len(t, resp.Firing, 3)
	require.Len(t, resp.History, 2)
	require.Equal(t, "firing", resp.History[0].State)
	_, err := b.store.AlertResolve(ctx, []*store.AlertNoticeParams{{ID: resp.Firing[0].ID, Payload: []byte(`{}`), Now: now.Add(time.Minute)}})
	require.NoError(t, err)
	cursor := resp.NextCursor
	resp.NextCursor = ""
	b.admin("GET", "/api/alerts?limit=2&cursor="+cursor, nil).json(t, &resp)
	require.Len(t, resp.Firing, 2)
	require.Len(t, resp.History, 1)
	require.Empty(t, resp.NextCursor)
	b.refused("GET", "/api/alerts?cursor=x", nil, 400, shared.CodeInvalid)
}
