package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// A webhook for a host whose long poll waits here having found nothing is
// stored leased to that poll, which answers with it once committed, with no
// lease of its own.

func TestLongPollIntakeLeasesToTheWaitingPoll(t *testing.T) {
	b, s, lc := leaseCountingSetup(t)
	hostID, token := b.newHost("h")
	ch := b.beatAsync(context.Background(), token, shared.HeartbeatRequest{WaitS: 30})
	waitIdle(t, s, hostID)
	id := b.intakeID(hostID, "a")
	hb := answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, id, hb.Webhooks[0].DeliveryID)
	require.Equal(t, 1, hb.Webhooks[0].Attempt)
	require.Zero(t, lc.leased.Load(), "leased as it was stored: no lease of its own")
	require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusDelivered }, 5*time.Second, time.Millisecond)
	require.Equal(t, []store.DeliveryEvent{
		{To: store.StatusQueued, Reason: store.TransitionReceive.Reason},
		{From: store.StatusQueued, To: store.StatusDelivering, Reason: store.TransitionLease.Reason, Attempt: 1},
		{From: store.StatusDelivering, To: store.StatusDelivered, Reason: store.TransitionDelivered.Reason, Attempt: 1},
	}, b.trail(id), "the trail of a lease")

	// The provider sends it again: a duplicate, neither leased nor
	// answered; the poll goes on waiting for the next one.
	ch = b.beatAsync(context.Background(), token, shared.HeartbeatRequest{WaitS: 30, WebhookAcks: []string{id}})
	waitIdle(t, s, hostID)
	require.Equal(t, id, b.intakeID(hostID, "a"))
	settled(t, s, hostID, func() bool { return len(ch) > 0 })
	require.Empty(t, ch, "nothing answered twice")
	next := b.intakeID(hostID, "b")
	hb = answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, next, hb.Webhooks[0].DeliveryID)
	require.Equal(t, store.StatusAcked, b.status(hostID, id))
	require.Zero(t, lc.leased.Load())
}

func TestLongPollWithABacklogLeasesItFirst(t *testing.T) {
	b, s, lc := leaseCountingSetup(t)
	hostID, token := b.newHost("h")
	older := b.intakeID(hostID, "a")
	require.Nil(t, s.leaser.Reserve(hostID, 2), "no poll waiting: stored pending")
	require.Equal(t, store.StatusQueued, b.status(hostID, older))
	hb := answered(t, b.beatAsync(context.Background(), token, shared.HeartbeatRequest{WaitS: 30}))
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, older, hb.Webhooks[0].DeliveryID, "leased, oldest first")
	require.Equal(t, int64(1), lc.leased.Load())
}

func TestLongPollEndingBeforeItsAnswerLosesNothing(t *testing.T) {
	b, s, lc := leaseCountingSetup(t)
	hostID, token := b.newHost("h")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := b.beatAsync(ctx, token, shared.HeartbeatRequest{WaitS: 30})
	waitIdle(t, s, hostID)
	lc.hold, lc.committed = make(chan struct{}), make(chan struct{}, 1)
	answeredProvider := b.sendGitHubAsync(hostID, "a", prBody)
	<-lc.committed // stored leased to the poll, not yet handed to it
	cancel()       // the host hangs up
	require.Error(t, (<-ch).err)
	close(lc.hold)
	id := <-answeredProvider
	require.NotEmpty(t, id, "the provider is answered")

	// Whether the poll saw its host gone before the insert settled (then
	// it released the delivery) or wrote its answer to a closed connection
	// (then the host says it lost that answer), the next heartbeat gets it,
	// as a second attempt.
	lc.hold = nil
	hb := answered(t, b.beatAsync(context.Background(), token, shared.HeartbeatRequest{WaitS: 30, AnswerLost: true}))
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, id, hb.Webhooks[0].DeliveryID)
	require.Equal(t, 2, hb.Webhooks[0].Attempt)
	require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusDelivered }, 5*time.Second, time.Millisecond)
	tr := b.trail(id)
	require.Contains(t, []int{5, 6}, len(tr), "received, leased, [delivered,] released, leased again, delivered")
	require.Contains(t, []string{store.TransitionRelease.Reason, store.TransitionAnswerLost.Reason}, tr[len(tr)-3].Reason)
	require.Equal(t, store.TransitionLease.Reason, tr[len(tr)-2].Reason)
	require.Equal(t, 2, tr[len(tr)-2].Attempt)
}
