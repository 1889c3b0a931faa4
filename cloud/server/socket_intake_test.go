package server

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// A webhook for a host whose socket has room and nothing else to push is
// stored leased to that socket and pushed once committed, with no lease of
// its own; without room it is stored pending, as for any host.

// leaseCounting counts the deliveries leased by DeliveryLease (not at
// intake), and can hold an insert leased at intake after its commit.
type leaseCounting struct {
	store.Store
	leased atomic.Int64
	looks  atomic.Int64 // DeliveryLease and DeliveryNextRetryAt calls
	// hold, when set, receives once a leased insert committed, and the
	// insert returns once it is closed.
	hold, committed chan struct{}
}

func (l *leaseCounting) DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error) {
	l.looks.Add(1)
	res, err := l.Store.DeliveryLease(ctx, p)
	if err == nil {
		l.leased.Add(int64(len(res.Deliveries)))
	}
	return res, err
}

func (l *leaseCounting) DeliveryNextRetryAt(ctx context.Context, hostID string) (*time.Time, error) {
	l.looks.Add(1)
	return l.Store.DeliveryNextRetryAt(ctx, hostID)
}

func (l *leaseCounting) DeliveryInsert(ctx context.Context, p *store.DeliveryInsertParams) (*store.DeliveryInsertResult, error) {
	res, err := l.Store.DeliveryInsert(ctx, p)
	if p.Lease != nil && l.hold != nil {
		l.committed <- struct{}{}
		<-l.hold
	}
	return res, err
}

func leaseCountingSetup(t *testing.T) (*bundle, *Server, *leaseCounting) {
	var lc *leaseCounting
	b, s := socketSetupOver(t, func(st store.Store) store.Store {
		lc = &leaseCounting{Store: st}
		return lc
	})
	return b, s, lc
}

// socketIntakeSetup is leaseCountingSetup with a host "h" connected over a
// socket that grants credit, waiting for work.
func socketIntakeSetup(t *testing.T, credit int) (*bundle, *Server, *leaseCounting, string, *hostSocket) {
	t.Helper()
	b, s, lc := leaseCountingSetup(t)
	hostID, token := b.newHost("h")
	hs := b.connect(token, credit)
	waitIdle(t, s, hostID)
	return b, s, lc, hostID, hs
}

// waitIdle waits until the host's socket would take a webhook at intake.
func waitIdle(t *testing.T, s *Server, hostID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v := s.leaser.Reserve(hostID, 2)
		v.Settle(nil, errors.New("only looking"))
		return v != nil
	}, 5*time.Second, time.Millisecond)
}

// settled waits until what waits for the host's work here — its socket's
// push loop, or its long poll — has nothing to react to
// (delivery.Intake.Idle), or done says it answered: once it is idle,
// nothing happening is a fact, not a bet on time.
func settled(t *testing.T, s *Server, hostID string, done func() bool) {
	t.Helper()
	in := s.leaser.(*delivery.Intake)
	require.Eventually(t, func() bool { return in.Idle(hostID) || done() }, 5*time.Second, time.Millisecond)
}

// trail is a delivery's audit trail as (from, to, reason, attempt).
func (b *bundle) trail(id string) []store.DeliveryEvent {
	b.t.Helper()
	evs, err := b.store.DeliveryEventList(context.Background(), id)
	require.NoError(b.t, err)
	out := make([]store.DeliveryEvent, len(evs))
	for i, e := range evs {
		out[i] = store.DeliveryEvent{From: e.From, To: e.To, Reason: e.Reason, Attempt: e.Attempt}
	}
	return out
}

func (b *bundle) intakeID(hostID, event string) string {
	b.t.Helper()
	a := b.sendGitHub(hostID, event, prBody)
	require.Equal(b.t, 200, a.status)
	var r shared.IntakeResponse
	a.json(b.t, &r)
	return r.DeliveryID
}

func TestSocketIntakeLeasesToTheSocket(t *testing.T) {
	b, _, lc, hostID, hs := socketIntakeSetup(t, 10)
	id := b.intakeID(hostID, "a")
	f := hs.read()
	require.Equal(t, shared.FrameWebhooks, f.Type)
	require.Len(t, f.Webhooks, 1)
	require.Equal(t, id, f.Webhooks[0].DeliveryID)
	require.Equal(t, 1, f.Webhooks[0].Attempt)
	require.Zero(t, lc.leased.Load(), "leased as it was stored: no lease of its own")

	// The provider sends it again: a duplicate, neither leased nor pushed.
	require.Equal(t, id, b.intakeID(hostID, "a"))
	hs.send(shared.Frame{Type: shared.FrameReport, ID: 1, Acks: []string{id}})
	f = hs.read()
	require.Equal(t, shared.FrameConfirm, f.Type, "nothing pushed twice")
	require.Equal(t, store.StatusAcked, b.status(hostID, id))
	require.Equal(t, []store.DeliveryEvent{
		{To: store.StatusQueued, Reason: store.TransitionReceive.Reason},
		{From: store.StatusQueued, To: store.StatusDelivering, Reason: store.TransitionPush.Reason, Attempt: 1},
		{From: store.StatusDelivering, To: store.StatusDelivered, Reason: store.TransitionDelivered.Reason, Attempt: 1},
		{From: store.StatusDelivered, To: store.StatusAcked, Reason: store.TransitionAck.Reason, Attempt: 1},
	}, b.trail(id), "acked once, recorded delivered by the ack")
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

func TestSocketIntakeLeasedPushesMakeNoQuery(t *testing.T) {
	b, s, lc, hostID, hs := socketIntakeSetup(t, 2)
	looks := lc.looks.Load()
	// Pushed, acked, credit granted again, one after the other: the socket
	// neither leases nor looks for work in between.
	for i, ev := range []string{"a", "b", "c", "d"} {
		id := b.intakeID(hostID, ev)
		require.Equal(t, []string{id}, hs.pushed(1))
		hs.send(shared.Frame{Type: shared.FrameReport, ID: int64(i), Acks: []string{id}})
		require.Equal(t, shared.FrameConfirm, hs.read().Type)
		hs.send(shared.Frame{Type: shared.FrameCredit, Received: int64(i + 1), Credit: 2})
		b.clock.Advance(time.Millisecond)
		waitIdle(t, s, hostID)
	}
	require.Equal(t, looks, lc.looks.Load(), "no lease, no look for the next retry")
	require.Zero(t, lc.leased.Load())
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

func TestSocketIntakeWithoutRoomStoresPending(t *testing.T) {
	b, s, lc, hostID, hs := socketIntakeSetup(t, 1)
	first := b.intakeID(hostID, "a")
	require.Equal(t, []string{first}, hs.pushed(1))
	b.clock.Advance(time.Millisecond)
	second := b.intakeID(hostID, "b")
	settled(t, s, hostID, func() bool { return b.status(hostID, second) != store.StatusQueued })
	require.Equal(t, store.StatusQueued, b.status(hostID, second), "no credit left: stored pending")

	hs.send(shared.Frame{Type: shared.FrameCredit, Received: 1, Credit: 1})
	require.Equal(t, []string{second}, hs.pushed(1), "leased once there is room")
	require.Equal(t, int64(1), lc.leased.Load())
	b.clock.Advance(delivery.MarkAfter) // unreported: marked on their own
	for _, id := range []string{first, second} {
		require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusDelivered }, 5*time.Second, time.Millisecond)
	}
	require.Equal(t, b.trail(second), b.trail(first), "the same trail, leased at intake or later")
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

func TestSocketClosingBeforeThePushLosesNothing(t *testing.T) {
	b, s, lc := leaseCountingSetup(t)
	hostID, token := b.newHost("h")
	hs := b.connect(token, 10)
	waitIdle(t, s, hostID)
	lc.hold, lc.committed = make(chan struct{}), make(chan struct{}, 1)
	answered := b.sendGitHubAsync(hostID, "a", prBody)
	<-lc.committed // stored leased to the socket, not yet handed to it
	hs.conn.CloseNow()
	// The socket's release waits for the insert holding its room.
	in := s.leaser.(*delivery.Intake)
	require.Eventually(t, func() bool { return in.Closing(hostID) || s.conns.Count() == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 1, s.conns.Count())
	close(lc.hold)
	id := <-answered
	require.NotEmpty(t, id, "the provider is answered")
	require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusRetrying }, 5*time.Second, time.Millisecond,
		"due again at once")
	tr := b.trail(id)
	require.Equal(t, store.TransitionConnectionLost.Reason, tr[len(tr)-1].Reason)

	// The next socket gets it at once, as a second attempt.
	lc.hold = nil
	hs = b.connect(token, 10)
	f := hs.read()
	require.Equal(t, shared.FrameWebhooks, f.Type)
	require.Equal(t, id, f.Webhooks[0].DeliveryID)
	require.Equal(t, 2, f.Webhooks[0].Attempt)
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

// sendGitHubAsync sends a signed GitHub webhook from another goroutine and
// gives the delivery id it was answered with ("" unless 200).
func (b *bundle) sendGitHubAsync(hostID, eventID string, body []byte) <-chan string {
	out := make(chan string, 1)
	go func() {
		a := b.sendGitHub(hostID, eventID, body)
		var r shared.IntakeResponse
		if a.status == 200 {
			a.json(b.t, &r)
		}
		out <- r.DeliveryID
	}()
	return out
}
