package server

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

type replayAnswer struct {
	Delivery struct {
		DeliveryID string       `json:"delivery_id"`
		ReplayOf   string       `json:"replay_of"`
		HostID     string       `json:"host_id"`
		EventID    string       `json:"event_id"`
		Status     store.Status `json:"status"`
	} `json:"delivery"`
	ReplayOf string `json:"replay_of"`
}

func replayPath(hostID, id string) string {
	return "/api/hosts/" + hostID + "/webhooks/" + url.PathEscape(id) + "/replay"
}

// A handled webhook is sent again as a new delivery: the same body and
// provider headers, an id of its own (the host's ledger runs it), the
// header naming the original, and both trails linked.
func TestReplayAnAckedDelivery(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	id := g.send("d-1")
	leased := g.beat(shared.HeartbeatRequest{})
	require.Len(t, leased.Webhooks, 1)
	g.beat(shared.HeartbeatRequest{WebhookAcks: []string{id}})
	require.Equal(t, store.StatusAcked, g.delivery(id).Status)

	b.clock.Advance(time.Hour)
	a := b.admin("POST", replayPath(g.id, id), nil)
	require.Equal(t, 201, a.status, string(a.body))
	var r replayAnswer
	a.json(t, &r)
	require.Equal(t, id, r.ReplayOf)
	require.Equal(t, id, r.Delivery.ReplayOf, "a replay's view names its original")
	require.NotEqual(t, id, r.Delivery.DeliveryID)
	require.Equal(t, g.id, r.Delivery.HostID)
	require.Equal(t, store.StatusQueued, r.Delivery.Status)
	require.Equal(t, fmt.Sprintf("d-1~replay-%d", b.clock.Now().UnixMilli()), r.Delivery.EventID)

	orig, replay := g.delivery(id), g.delivery(r.Delivery.DeliveryID)
	require.Equal(t, orig.RawBody, replay.RawBody, "the body as received")
	require.Equal(t, id, replay.Headers["x-relay-replay-of"])
	for k, v := range orig.Headers {
		if k != shared.HeaderTraceParent {
			require.Equal(t, v, replay.Headers[k], "provider header %s", k)
		}
	}
	require.NotEqual(t, orig.CorrelationID, replay.CorrelationID)
	require.Equal(t, store.StatusAcked, orig.Status, "the original is left as it is")
	require.Equal(t, []string{">queued#0 received (replay of " + id + " of host " + g.id + ", by an operator)"}, g.trail(replay.ID))
	trail := g.trail(id)
	require.Equal(t, "acked>acked#1 replayed as "+replay.ID+" to host "+g.id+", by an operator", trail[len(trail)-1])

	// Handed to the host like any webhook, as a first attempt.
	leased = g.beat(shared.HeartbeatRequest{})
	require.Len(t, leased.Webhooks, 1)
	w := leased.Webhooks[0]
	require.Equal(t, replay.ID, w.DeliveryID)
	require.Equal(t, 1, w.Attempt)
	require.Equal(t, id, w.Headers["x-relay-replay-of"])
}

func TestReplayToAnotherHost(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("a")
	other := b.claimAgent("b")
	id := g.send("d-1")
	a := b.admin("POST", replayPath(g.id, id), map[string]string{"host_id": other.id})
	require.Equal(t, 201, a.status, string(a.body))
	var r replayAnswer
	a.json(t, &r)
	require.Equal(t, other.id, r.Delivery.HostID)
	leased := other.beat(shared.HeartbeatRequest{})
	require.Len(t, leased.Webhooks, 1)
	require.Equal(t, r.Delivery.DeliveryID, leased.Webhooks[0].DeliveryID)
	trail := g.trail(id)
	require.Equal(t, "queued>queued#0 replayed as "+r.Delivery.DeliveryID+" to host "+other.id+", by an operator", trail[len(trail)-1])
}

func TestReplayRefusals(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("a")
	gone := b.claimAgent("gone")
	id := g.send("d-1")
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+gone.id+"/deactivate", nil).status)
	for _, c := range []struct {
		name   string
		path   string
		body   any
		status int
		msg    string
	}{
		{"unknown delivery", replayPath(g.id, "github:nope:1"), nil, 404, "no such delivery on this host"},
		{"another host's delivery", replayPath(gone.id, id), nil, 404, "no such delivery on this host"},
		{"not a host id", replayPath(g.id, id), map[string]string{"host_id": "nope"}, 400, "host_id: not a host id"},
		{"unknown host", replayPath(g.id, id), map[string]string{"host_id": "h_aaaaaaaaaaaaaaaaaaaaaaaa"}, 404, "no such host"},
		{"deactivated host", replayPath(g.id, id), map[string]string{"host_id": gone.id}, 409, "is deactivated"},
	} {
		a := b.admin("POST", c.path, c.body)
		require.Equal(t, c.status, a.status, "%s: %s", c.name, a.body)
		require.Contains(t, string(a.body), c.msg, c.name)
	}
	require.Equal(t, 1, b.count(g.id), "nothing stored")
}

// A sender cannot make a webhook pass for a replay: its X-Relay-Replay-Of
// is not stored.
func TestIntakeDropsASendersReplayHeader(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("a")
	hd := ghHeaders(testSecret, "d-fake", prBody)
	hd["X-Relay-Replay-Of"] = "github:forged:1"
	a := b.do("POST", "/api/webhooks/"+g.id+"/github", bytes.NewReader(prBody), hd)
	require.Equal(t, 200, a.status, string(a.body))
	var ir shared.IntakeResponse
	a.json(t, &ir)
	_, ok := g.delivery(ir.DeliveryID).Headers["x-relay-replay-of"]
	require.False(t, ok)
}
