package server

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// Intake caches hosts and sources (targetCache). Every change an operator
// or a host makes must show at once on the server that made it, on every
// other replica as soon as the store's notification arrives, and within
// targetTTL even if no one tells.

func TestTargetCacheSeesChangesAtOnce(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	require.Equal(t, 200, b.sendGitHub(g.id, "d-1", prBody).status, "cached from here on")

	// A new secret: the old one no longer verifies.
	a := b.admin("PUT", "/api/hosts/"+g.id+"/sources/github", map[string]any{"secrets": []string{"rotated"}})
	require.Equal(t, 200, a.status, string(a.body))
	require.Equal(t, 401, b.sendGitHub(g.id, "d-2", prBody).status)
	a = b.do("POST", "/api/webhooks/"+g.id+"/github", jsonBody(nil), nil)
	require.Equal(t, 401, a.status)

	// The operator's event filter applies at once.
	a = b.admin("PATCH", "/api/hosts/"+g.id+"/sources/github", map[string]any{"events": []string{"push"}})
	require.Equal(t, 200, a.status, string(a.body))
	hd := ghHeaders("rotated", "d-3", prBody)
	a = b.do("POST", "/api/webhooks/"+g.id+"/github", bytes.NewReader(prBody), hd)
	require.Equal(t, 200, a.status, string(a.body))
	var ir shared.IntakeResponse
	a.json(t, &ir)
	require.Equal(t, shared.IntakeFiltered, ir.Status)

	// A disabled source, then a deactivated host.
	a = b.admin("PUT", "/api/hosts/"+g.id+"/sources/github", map[string]any{"secrets": []string{"rotated"}, "enabled": false})
	require.Equal(t, 200, a.status, string(a.body))
	require.Equal(t, 404, b.do("POST", "/api/webhooks/"+g.id+"/github", bytes.NewReader(prBody), hd).status)
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+g.id+"/deactivate", nil).status)
	require.Equal(t, 410, b.do("POST", "/api/webhooks/"+g.id+"/github", bytes.NewReader(prBody), hd).status)
}

func TestTargetCacheRemembersUnknownHostsUntilCreated(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	unknown := auth.NewHostID()
	require.Equal(t, 404, b.sendGitHub(unknown, "d-1", prBody).status)
	entries, _ := b.srv.intake.Cached()
	require.Equal(t, 1, entries, "a well-formed unknown id's answer is cached")
	g := b.claimAgent("h")
	// The 404 for a missing source was cached; adding the source ends it.
	require.Equal(t, 404, b.do("POST", "/api/webhooks/"+g.id+"/billing", bytes.NewReader(prBody), nil).status)
	a := b.admin("PUT", "/api/hosts/"+g.id+"/sources/billing", map[string]any{"provider": "github", "secrets": []string{testSecret}})
	require.Equal(t, 201, a.status, string(a.body))
	a = b.do("POST", "/api/webhooks/"+g.id+"/billing", bytes.NewReader(prBody), ghHeaders(testSecret, "d-2", prBody))
	require.Equal(t, 200, a.status, string(a.body))
}

// A change written to the store by another process, with no one telling
// this server, shows once targetTTL has passed.
func TestTargetCacheEntriesExpire(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	require.Equal(t, 200, b.sendGitHub(g.id, "d-1", prBody).status)
	_, err := b.store.HostDeactivate(context.Background(), &store.HostDeactivateParams{HostID: g.id, Now: b.clock.Now()})
	require.NoError(t, err)
	require.Equal(t, 200, b.sendGitHub(g.id, "d-2", prBody).status, "cached, and no listener runs in this test")
	b.clock.Advance(intake.TargetTTL)
	require.Equal(t, 410, b.sendGitHub(g.id, "d-3", prBody).status)
}

// Two replicas on one Postgres: what one changes, the other's cache drops
// when the store's notification arrives.
func TestTargetCacheAcrossReplicas(t *testing.T) {
	a, b := twoReplicas(t)
	g := a.claimAgent("h")
	require.Equal(t, 200, b.sendGitHub(g.id, "d-1", prBody).status, "b caches the target")

	r := a.admin("PUT", "/api/hosts/"+g.id+"/sources/github", map[string]any{"secrets": []string{"rotated"}})
	require.Equal(t, 200, r.status, string(r.body))
	require.Eventually(t, func() bool { return b.sendGitHub(g.id, "d-2", prBody).status == 401 },
		10*time.Second, 5*time.Millisecond, "b still verifies with the old secret")

	require.Equal(t, 200, a.admin("POST", "/api/hosts/"+g.id+"/deactivate", nil).status)
	hd := ghHeaders("rotated", "d-3", prBody)
	require.Eventually(t, func() bool {
		return b.do("POST", "/api/webhooks/"+g.id+"/github", bytes.NewReader(prBody), hd).status == 410
	}, 10*time.Second, 5*time.Millisecond, "b still takes webhooks for a deactivated host")
}

// Made-up ids cost the cloud nothing it keeps: a malformed host id or
// source name is answered 404 before any look-up and never cached, and the
// answers for well-formed unknown ones are bounded in entries and bytes,
// apart from real hosts' targets, which a flood does not push out.
func TestTargetCacheBoundedAgainstMadeUpIDs(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	const maxMissing = 50
	b.srv.intake = intake.New(b.srv.intakeConfig(intake.Config{MissingTargets: maxMissing}))
	hostID, _ := b.newHost("h")
	require.Equal(t, 200, b.sendGitHub(hostID, "d-1", prBody).status)
	entries, _ := b.srv.intake.Cached()
	require.Equal(t, 1, entries)

	big := strings.Repeat("a", 256<<10)
	for _, path := range []string{
		"/api/webhooks/" + big + "/github",
		"/api/webhooks/h_" + big + "/github",
		"/api/webhooks/h_nosuchhost/github",
		"/api/webhooks/" + strings.ToUpper(hostID) + "/github",
		"/api/webhooks/" + hostID + "/" + big,
		"/api/webhooks/" + hostID + "/" + strings.Repeat("a", 65),
		"/api/webhooks/" + hostID + "/GitHub",
		"/api/webhooks/" + hostID + "/_github",
	} {
		a := b.do("POST", path, bytes.NewReader(prBody), nil)
		require.Equal(t, 404, a.status, path[:min(len(path), 80)])
		require.Equal(t, shared.CodeNotFound, a.errCode(t))
		entries, bytes := b.srv.intake.Cached()
		require.Equal(t, 1, entries, "malformed names are never cached")
		require.Less(t, bytes, int64(64<<10))
	}

	for i := range 20 * maxMissing {
		id := auth.NewHostID()
		if i%2 == 1 {
			id = hostID // a real host, a well-formed unknown source
		}
		a := b.do("POST", "/api/webhooks/"+id+"/src-"+strconv.Itoa(i), bytes.NewReader(prBody), nil)
		require.Equal(t, 404, a.status)
		entries, _ := b.srv.intake.Cached()
		require.LessOrEqual(t, entries, 1+maxMissing)
	}
	require.Equal(t, 200, b.sendGitHub(hostID, "d-2", prBody).status)
	require.True(t, b.srv.intake.Holds(hostID, "github"), "the real target outlived the flood")
}

// A host's own configuration never makes the cloud drop a webhook: a
// subscription that lacks the source (a typo on the host) or its event
// still gets the webhook stored and handed to the host, which records why
// it skips it. Only the operator's event filter answers "filtered".
func TestHostSubscriptionNeverDropsAWebhook(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	for _, sub := range []map[string]shared.SourceSubscription{
		{"githb": {Enabled: true}},                            // a typo: no github at all
		{"github": {Enabled: false}},                          // disabled on the host
		{"github": {Enabled: true, Events: []string{"push"}}}, // not this event
		{}, // no sources
	} {
		g.beat(shared.HeartbeatRequest{Config: &shared.Subscription{Webhooks: sub}})
		id := fmt.Sprintf("sub-%d", b.count(g.id))
		a := b.sendGitHub(g.id, id, prBody)
		require.Equal(t, 200, a.status, string(a.body))
		var ir shared.IntakeResponse
		a.json(t, &ir)
		require.Equal(t, shared.IntakeQueued, ir.Status, "subscription %v", sub)
		leased := g.beat(shared.HeartbeatRequest{})
		require.Len(t, leased.Webhooks, 1, "handed to the host, which decides: subscription %v", sub)
		require.Equal(t, ir.DeliveryID, leased.Webhooks[0].DeliveryID)
		g.beat(shared.HeartbeatRequest{WebhookAcks: []string{ir.DeliveryID}})
	}
}
