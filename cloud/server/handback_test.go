package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// handedBack asserts that id was handed back at now: due again at once,
// its attempt given back.
func (b *bundle) handedBack(hostID, id string, now time.Time) {
	b.t.Helper()
	d, err := b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(b.t, err)
	require.Equal(b.t, store.StatusRetrying, d.Status)
	require.NotNil(b.t, d.NextRetryAt)
	require.True(b.t, now.Equal(*d.NextRetryAt), "due at once, not %s", d.NextRetryAt)
	require.Equal(b.t, 1, d.Attempts)
	require.Equal(b.t, store.DefaultMaxAttempts+1, d.MaxAttempts, "the attempt given back")
	evs, err := b.store.DeliveryEventList(context.Background(), id)
	require.NoError(b.t, err)
	require.Equal(b.t, store.TransitionHandBack.Reason, evs[len(evs)-1].Reason)
}

// A heartbeat's nack saying not_started hands the webhook back; without it,
// the same nack follows the schedule.
func TestHeartbeatHandBack(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	require.Equal(t, 200, b.sendGitHub(hostID, "d-1", prBody).status)
	require.Equal(t, 200, b.sendGitHub(hostID, "d-2", prBody).status)
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Len(t, hb.Webhooks, 2)
	back, plain := hb.Webhooks[0].DeliveryID, hb.Webhooks[1].DeliveryID

	require.Equal(t, 200, b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{
		{DeliveryID: back, Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
		{DeliveryID: plain, Error: "host stopping: not started", Retryable: true, Attempt: 1},
	}}).status)
	b.handedBack(hostID, back, b.clock.Now())
	d, err := b.store.DeliveryGet(context.Background(), hostID, plain)
	require.NoError(t, err)
	require.Equal(t, store.DefaultMaxAttempts, d.MaxAttempts)
	require.Equal(t, b.clock.Now().Add(30*time.Second), *d.NextRetryAt, "an ordinary nack: the schedule's delay")
}

// A socket's report frame carries not_started as a heartbeat does. A
// hand-back says the host is stopping: nothing more is pushed on that
// socket, whatever credit is left, so what it handed back (due at once)
// is not pushed straight back to it.
func TestSocketReportHandBack(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, hs, ids := b.connectedWith3(10)
	require.Equal(t, ids, hs.pushed(3))
	hs.send(shared.Frame{Type: shared.FrameReport, ID: 1, Acks: ids[1:2], Nacks: []shared.Nack{
		{DeliveryID: ids[0], Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true}}})
	f := hs.read()
	require.Equal(t, shared.FrameConfirm, f.Type)
	b.handedBack(hostID, ids[0], b.clock.Now())
	require.Equal(t, 200, b.sendGitHub(hostID, "after", prBody).status)
	// The socket's next frame answers this report: no webhooks came before.
	hs.send(shared.Frame{Type: shared.FrameReport, ID: 2, Acks: ids[2:]})
	f = hs.read()
	require.Equal(t, shared.FrameConfirm, f.Type, "nothing pushed after the hand-back")
	require.Equal(t, int64(2), f.ID)
	require.Equal(t, store.StatusRetrying, b.status(hostID, ids[0]))
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

// The ceiling of hand-backs lies above what a source may set: a source's
// own max_attempts is always honoured by a hand-back.
func TestHandBackCeilingAboveSourceAttempts(t *testing.T) {
	require.Greater(t, delivery.HandBackCeiling, maxSourceAttempts)
}

// leaseHeldSetup serves sockets over a store whose leases leaseHeld holds.
func leaseHeldSetup(t *testing.T) (*bundle, *leaseHeld) {
	var lh *leaseHeld
	b, _ := socketSetupOver(t, func(st store.Store) store.Store {
		lh = &leaseHeld{Store: st, leased: make(chan []string, 1), resume: make(chan []string)}
		return lh
	})
	return b, lh
}

// leaseHeld holds a lease that found deliveries, once armed, after it
// committed: as the push loop has leased and not yet written.
type leaseHeld struct {
	store.Store
	armed          atomic.Bool
	leased, resume chan []string
}

func (l *leaseHeld) DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error) {
	res, err := l.Store.DeliveryLease(ctx, p)
	if err == nil && len(res.Deliveries) > 0 && l.armed.CompareAndSwap(true, false) {
		var ids []string
		for _, d := range res.Deliveries {
			ids = append(ids, d.ID)
		}
		l.leased <- ids
		<-l.resume
	}
	return res, err
}

// A push leased while the host says it is stopping — by handing back what
// it held, or in a report of acks alone that says so — is given back
// unwritten: the host would never start it, and its closing socket would
// have spent the attempt (with one allowed, a dead letter).
func TestSocketLeaseDuringStoppingReportIsGivenBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report func(pushed []string) shared.Frame
		back   func(pushed, leased []string) []string // handed back in the end
	}{
		{"hand-back", func(pushed []string) shared.Frame {
			return shared.Frame{Type: shared.FrameReport, ID: 1, Nacks: []shared.Nack{
				{DeliveryID: pushed[0], Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true}}}
		}, func(pushed, leased []string) []string { return append(append([]string{}, pushed...), leased...) }},
		{"stopping", func(pushed []string) shared.Frame {
			return shared.Frame{Type: shared.FrameReport, ID: 1, Acks: pushed, Stopping: true}
		}, func(_, leased []string) []string { return leased }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, lh := leaseHeldSetup(t)
			hostID, token := b.newHost("h")
			hs := b.connect(token, 1)
			require.Equal(t, 200, b.sendGitHub(hostID, "d-0", prBody).status)
			pushed := hs.pushed(1)
			// No room left: these wait in the store until the host grants more.
			require.Equal(t, 200, b.sendGitHub(hostID, "d-1", prBody).status)
			require.Equal(t, 200, b.sendGitHub(hostID, "d-2", prBody).status)

			lh.armed.Store(true)
			hs.send(shared.Frame{Type: shared.FrameCredit, Received: 1, Credit: 3})
			leased := <-lh.leased
			require.Len(t, leased, 2)
			// The host stops meanwhile.
			hs.send(tc.report(pushed))
			require.Equal(t, shared.FrameConfirm, hs.read().Type)
			close(lh.resume)

			for _, id := range tc.back(pushed, leased) {
				require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusRetrying }, 5*time.Second, time.Millisecond)
				b.handedBack(hostID, id, b.clock.Now())
			}
			// Nothing came on the socket: the next frame answers the next report.
			hs.send(shared.Frame{Type: shared.FrameReport, ID: 2})
			f := hs.read()
			require.Equal(t, shared.FrameConfirm, f.Type, "nothing pushed after the host said it stops")
			require.Equal(t, int64(2), f.ID)
			require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
		})
	}
}
