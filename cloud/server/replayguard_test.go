package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

type heldList struct {
	Count    int               `json:"count"`
	Requests []quarantinedJSON `json:"requests"`
}

func (b *edgeBundle) quarantined() heldList {
	b.t.Helper()
	a := b.admin("GET", "/api/quarantine", nil)
	require.Equal(b.t, 200, a.status, string(a.body))
	var l heldList
	a.json(b.t, &l)
	return l
}

func intakeAnswer(t *testing.T, a answer) shared.IntakeResponse {
	t.Helper()
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	return r
}

// guardedHost is a host whose github source has the replay guard on.
func (b *edgeBundle) guardedHost() string {
	b.t.Helper()
	hostID, _ := b.newHost("h")
	a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/github", map[string]any{"secrets": []string{testSecret},
		"options": map[string]string{"replay_guard": "on"}})
	require.Equal(b.t, 200, a.status, string(a.body))
	return hostID
}

// A GitHub webhook's body under a new X-GitHub-Delivery is held, answered
// as if stored, counted and audited; under its own id it is the ordinary
// duplicate; released by an operator it is delivered once and leaves the
// quarantine.
func TestReplayGuardHoldsAndReleases(t *testing.T) {
	clock := newClock()
	b := newEdge(t, openStore(t), ringOf(t, 1), clock, Config{})
	hostID := b.guardedHost()
	ctx := context.Background()

	first := intakeAnswer(t, b.sendGitHub(hostID, "d-1", prBody))
	require.Equal(t, shared.IntakeQueued, first.Status)

	clock.Advance(time.Hour)
	replayedAt := clock.Now()
	replay := intakeAnswer(t, b.sendGitHub(hostID, "d-forged", prBody))
	require.Equal(t, shared.IntakeResponse{DeliveryID: "github:d-forged:" + itoa(replayedAt.UnixMilli()), Status: shared.IntakeQueued},
		replay, "answered as a stored webhook")
	require.Equal(t, 1, b.count(hostID), "not stored as a delivery")
	_, err := b.store.DeliveryGet(ctx, hostID, replay.DeliveryID)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, "1", b.metric(`relay_intake_requests_total{outcome="replay_held",provider="github"}`))

	l := b.quarantined()
	require.Equal(t, 1, l.Count)
	held := l.Requests[0]
	require.Equal(t, store.QuarantineReplay, held.Kind)
	require.Contains(t, held.Reason, first.DeliveryID, "names the earlier delivery")
	require.Contains(t, held.Reason, "d-forged")
	require.Equal(t, len(prBody), held.BodySize)
	rs := b.rejections(hostID)
	require.Len(t, rs, 1)
	require.Equal(t, 200, rs[0].Status, "what the sender was answered")
	require.Contains(t, rs[0].Reason, "suspected replay")
	require.Contains(t, rs[0].Reason, first.DeliveryID)

	// The provider's retry of the first: the ordinary duplicate.
	dup := intakeAnswer(t, b.sendGitHub(hostID, "d-1", prBody))
	require.Equal(t, shared.IntakeResponse{DeliveryID: first.DeliveryID, Status: shared.IntakeDuplicate}, dup)
	require.Equal(t, 1, b.quarantined().Count)

	// The release passes leave it: only an operator releases it.
	res, err := b.srv.ReleaseQuarantine(ctx)
	require.NoError(t, err)
	require.Equal(t, intake.ReleaseResult{}, res)
	require.Equal(t, 1, b.quarantined().Count)

	a := b.admin("POST", "/api/quarantine/"+strconv.FormatInt(held.ID, 10)+"/release", nil)
	require.Equal(t, 200, a.status, string(a.body))
	var rel shared.IntakeResponse
	a.json(t, &rel)
	require.Equal(t, shared.IntakeResponse{DeliveryID: replay.DeliveryID, Status: shared.IntakeQueued}, rel,
		"the delivery the sender was told of")
	require.Equal(t, 2, b.count(hostID))
	d, err := b.store.DeliveryGet(ctx, hostID, rel.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, prBody, d.RawBody)
	require.Equal(t, "d-forged", d.Headers["x-github-delivery"])
	events, err := b.store.DeliveryEventList(ctx, d.ID)
	require.NoError(t, err)
	require.Contains(t, events[0].Reason, "released by an operator")
	require.Contains(t, events[0].Reason, first.DeliveryID)
	require.Zero(t, b.quarantined().Count, "gone from the held list")

	// Released once: a second release finds nothing, and the replay sent
	// again under that id is a duplicate of the released delivery.
	require.Equal(t, 404, b.admin("POST", "/api/quarantine/"+strconv.FormatInt(held.ID, 10)+"/release", nil).status)
	again := intakeAnswer(t, b.sendGitHub(hostID, "d-forged", prBody))
	require.Equal(t, shared.IntakeDuplicate, again.Status)
	require.Equal(t, 2, b.count(hostID))
	require.Zero(t, b.quarantined().Count)
}

// A day later the same body under a new id is an event of its own.
func TestReplayGuardWindow(t *testing.T) {
	clock := newClock()
	b := newEdge(t, openStore(t), ringOf(t, 1), clock, Config{})
	hostID := b.guardedHost()
	intakeAnswer(t, b.sendGitHub(hostID, "d-1", prBody))
	clock.Advance(intake.ReplayWindow - time.Millisecond)
	intakeAnswer(t, b.sendGitHub(hostID, "d-2", prBody))
	require.Equal(t, 1, b.count(hostID), "within the window: held")
	clock.Advance(intake.ReplayWindow + time.Millisecond)
	intakeAnswer(t, b.sendGitHub(hostID, "d-3", prBody))
	require.Equal(t, 2, b.count(hostID), "past the window: delivered")
}

// replay_guard: off delivers the same body under a new id; a Stripe source
// (signed with a timestamp) is not guarded, nor a generic one.
func TestReplayGuardOffAndUnguarded(t *testing.T) {
	clock := newClock()
	b := newEdge(t, openStore(t), ringOf(t, 1), clock, Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "options": map[string]string{"replay_guard": "off"}})
	intakeAnswer(t, b.sendGitHub(hostID, "d-1", prBody))
	r := intakeAnswer(t, b.sendGitHub(hostID, "d-2", prBody))
	require.Equal(t, shared.IntakeQueued, r.Status)
	require.Equal(t, 2, b.count(hostID), "guard off: delivered")
	require.Zero(t, b.quarantined().Count)

	a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/github", map[string]any{"secrets": []string{testSecret},
		"options": map[string]string{"replay_guard": "maybe"}})
	require.Equal(t, 400, a.status, string(a.body))
	a = b.admin("PUT", "/api/hosts/"+hostID+"/sources/billing", map[string]any{"provider": "stripe", "secrets": []string{"whsec_x"},
		"options": map[string]string{"replay_guard": "off"}})
	require.Equal(t, 400, a.status, "stripe has no replay guard: %s", a.body)

	b.addSource(hostID, "billing", map[string]any{"provider": "stripe", "secrets": []string{"whsec_x"}})
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	send := func() answer {
		return b.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), stripeHeaders("whsec_x", clock.Now().Unix(), body))
	}
	require.Equal(t, shared.IntakeQueued, intakeAnswer(t, send()).Status)
	clock.Advance(time.Minute)
	require.Equal(t, shared.IntakeDuplicate, intakeAnswer(t, send()).Status, "the same event: a duplicate")
	sum := sha256.Sum256(body)
	_, err := b.store.DeliveryByDigest(context.Background(), &store.DigestLookupParams{
		HostID: hostID, Source: "billing", Digest: sum[:], Since: time.Time{}})
	require.ErrorIs(t, err, store.ErrNotFound, "no digest kept for an unguarded source")

	b.addSource(hostID, "plain", map[string]any{"provider": "generic", "secrets": []string{"s"}})
	for _, id := range []string{"e-1", "e-2"} {
		a := b.do("POST", "/api/webhooks/"+hostID+"/plain", bytes.NewReader(body), genericHeaders("s", id, body))
		require.Equal(t, 202, a.status, string(a.body))
	}
	require.Equal(t, 5, b.count(hostID), "generic: both delivered")
	require.Zero(t, b.quarantined().Count)
}

// A request waiting for a key is not released one by one; an unknown id is
// 404, a bad one 400.
func TestReleaseHeldRefusesOthers(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	lost := newEdge(t, st, ringOf(t, 9), clock, Config{})
	require.Equal(t, 503, lost.sendGitHub(hostID, "d-1", prBody).status)
	l := lost.quarantined()
	require.Len(t, l.Requests, 1)
	require.Equal(t, store.QuarantineSecret, l.Requests[0].Kind)
	a := lost.admin("POST", "/api/quarantine/"+strconv.FormatInt(l.Requests[0].ID, 10)+"/release", nil)
	require.Equal(t, 409, a.status, string(a.body))
	require.Equal(t, 404, lost.admin("POST", "/api/quarantine/999999/release", nil).status)
	require.Equal(t, 400, lost.admin("POST", "/api/quarantine/x/release", nil).status)
	require.Equal(t, 401, lost.do("POST", "/api/quarantine/1/release", nil, nil).status)
}
