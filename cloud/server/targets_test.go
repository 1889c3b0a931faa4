package server

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
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

	// The host's subscription (sent with a heartbeat) filters at once.
	a = b.heartbeat(g.token, shared.HeartbeatRequest{Config: &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{
		"github": {Enabled: false},
	}}})
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
	b := setup(t)
	require.Equal(t, 404, b.sendGitHub("h_nosuchhost", "d-1", prBody).status)
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
	b.clock.Advance(targetTTL)
	require.Equal(t, 410, b.sendGitHub(g.id, "d-3", prBody).status)
}

// Two replicas on one Postgres: what one changes, the other's cache drops
// when the store's notification arrives.
func TestTargetCacheAcrossReplicas(t *testing.T) {
	url := pgtest.NewDatabase(t)
	open := func() store.Store {
		st, err := postgres.Open(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, _ := waitServer(t, open())
	b, _ := waitServer(t, open())
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
