package delivery_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// A webhook stored for a host whose long poll waits here having found
// nothing is stored leased to that poll, which answers with it: no lease of
// its own.

// polling is a long poll of the bundle's host, on a service that counts
// leases, with the intake's reservations over it.
type polling struct {
	svc    *delivery.Service
	cs     *countingStore
	obs    *observed
	intake *delivery.Intake
}

func (b *bundle) polling() *polling { return b.pollingParking(true) }

// pollingParking is polling with answered polls parking from the start or
// not (delivery.Config.ParkPolls).
func (b *bundle) pollingParking(park bool) *polling {
	b.t.Helper()
	svc, cs, obs := b.countedObservedParking(park)
	conns := delivery.NewConnections(b.store, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second)
	return &polling{svc: svc, cs: cs, obs: obs, intake: delivery.NewIntake(conns, svc)}
}

// poll runs a long poll taking at most max in the background.
func (b *bundle) poll(ctx context.Context, p *polling, max int) <-chan leased {
	ch := make(chan leased, 1)
	go func() {
		res, err := p.svc.Lease(ctx, b.host, max, 30*time.Second)
		ch <- leased{res, err}
	}()
	return ch
}

// stillWaiting asserts the poll waits on, having answered nothing: once
// it has nothing to react to (Intake.Idle), that is a fact, not a bet on
// time.
func (b *bundle) stillWaiting(p *polling, ch <-chan leased, msg string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return p.intake.Idle(b.host.ID) || len(ch) > 0 }, 10*time.Second, time.Millisecond)
	require.Empty(b.t, ch, msg)
}

// stillClosing asserts the poll, ending, waits for the inserts holding its
// room (Intake.Closing), having answered nothing.
func (b *bundle) stillClosing(p *polling, ch <-chan leased, msg string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return p.intake.Closing(b.host.ID) || len(ch) > 0 }, 10*time.Second, time.Millisecond)
	require.Empty(b.t, ch, msg)
}

// reservePoll waits until the poll takes a reservation.
func (b *bundle) reservePoll(p *polling) *delivery.Reservation {
	b.t.Helper()
	var v *delivery.Reservation
	require.Eventually(b.t, func() bool { v = p.intake.Reserve(b.host.ID, 2); return v != nil }, 10*time.Second, time.Millisecond)
	return v
}

// trail is a delivery's audit trail as (from, to, reason, attempt).
func (b *bundle) trail(id string) []store.DeliveryEvent {
	b.t.Helper()
	evs, err := b.store.DeliveryEventList(b.ctx, id)
	require.NoError(b.t, err)
	out := make([]store.DeliveryEvent, len(evs))
	for i, e := range evs {
		out[i] = store.DeliveryEvent{From: e.From, To: e.To, Reason: e.Reason, Attempt: e.Attempt}
	}
	return out
}

func TestPollAnswersWithAWebhookStoredLeasedToIt(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		// A delivery leased the usual way, for its audit trail.
		usual := b.send()
		require.Equal(t, []string{usual}, b.lease())

		p := b.polling()
		ch := b.poll(b.ctx, p, 2)
		v1 := b.reservePoll(p)
		v2 := b.reservePoll(p)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "at most its max")
		res, handed := b.sendLeased(v1, "e-polled")
		require.True(t, handed)
		b.stillWaiting(p, ch, "it answers once every reservation it holds settled")
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "handed one: it takes no more")
		require.False(t, v2.Settle(nil, errors.New("disk full")))
		got := <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		d := got.res.Deliveries[0]
		require.Equal(t, res.Delivery.ID, d.ID)
		require.Equal(t, store.StatusDelivering, d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, []byte(`{}`), d.RawBody, "with its body, to be answered")
		require.Equal(t, int64(1), p.cs.leases.Load(), "only the look before it waited: no lease for it")
		require.Equal(t, int64(1), p.obs.leased.Load(), "observed as leased")
		require.Equal(t, b.clock.Now().Add(time.Minute), b.get(d.ID).LeaseExpiresAt.UTC())

		// Handed out as a leased one is: the same trail.
		p.svc.RecordWrite(b.ctx, b.host.ID, []string{d.ID}, nil)
		require.Equal(t, store.StatusDelivered, b.get(d.ID).Status)
		require.Equal(t, b.trail(usual), b.trail(d.ID), "its audit equal to a lease's")
		require.True(t, p.svc.Parked(b.host.ID), "answered with all there was: parked for the host's next poll")
		b.clock.Advance(delivery.ParkFor)
		require.Eventually(t, func() bool { return !p.svc.Parked(b.host.ID) }, 10*time.Second, time.Millisecond)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "the poll ended")
	})
}

func TestPollReservationGivenBackKeepsItWaiting(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		ch := b.poll(b.ctx, p, 1)
		v := b.reservePoll(p)
		// A repeat of a stored event is not leased: the room comes back.
		first := b.send()
		res, err := b.store.DeliveryInsert(b.ctx, &store.DeliveryInsertParams{ID: "github:e-1", HostID: b.host.ID,
			Source: "github", EventID: "e-1", RawBody: []byte(`{}`), ReceivedAt: b.clock.Now(), Lease: v.Lease()})
		require.NoError(t, err)
		require.Equal(t, store.InsertDuplicate, res.Outcome)
		require.False(t, v.Settle(res, nil))
		// The pending one woke the poll, which leases it.
		got := <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, first, got.res.Deliveries[0].ID)

		ch = b.poll(b.ctx, p, 1)
		v = b.reservePoll(p)
		require.False(t, v.Settle(nil, errors.New("disk full")))
		b.stillWaiting(p, ch, "it goes on waiting")
		v = b.reservePoll(p)
		_, handed := b.sendLeased(v, "e-2")
		require.True(t, handed)
		got = <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, 1, got.res.Deliveries[0].Attempts)
	})
}

func TestPollReservesNothingUnlessWaitingCaughtUp(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "no poll waiting")
		id := b.send()
		require.Equal(t, store.StatusQueued, b.get(id).Status, "stored pending as before")
		// A poll with a backlog leases it, oldest first.
		got := <-b.poll(b.ctx, p, 10)
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, id, got.res.Deliveries[0].ID)
		require.True(t, p.svc.Parked(b.host.ID), "it found all there was: parked")
		// A lease that does not wait takes none, and ends the parked one
		// (which held nothing).
		res, err := p.svc.Lease(b.ctx, b.host, 10, 0)
		require.NoError(t, err)
		require.Empty(t, res.Deliveries)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2))
	})
}

func TestPollEndingWithAReservationLosesNothing(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		ctx, cancel := context.WithCancel(b.ctx)
		ch := b.poll(ctx, p, 5)
		v := b.reservePoll(p)
		cancel() // the host hangs up between the reservation and the commit
		b.stillClosing(p, ch, "the poll waits for the insert holding room")
		res, handed := b.sendLeased(v, "e-1")
		require.True(t, handed)
		got := <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries, "nothing answered")
		d := b.get(res.Delivery.ID)
		require.Equal(t, store.StatusRetrying, d.Status, "released")
		require.Equal(t, b.clock.Now(), d.NextRetryAt.UTC(), "due again at once")
		require.Equal(t, 1, d.Attempts, "the attempt counts")
		require.Equal(t, []string{res.Delivery.ID}, b.lease(), "in the very next lease")
		require.Equal(t, 2, b.get(res.Delivery.ID).Attempts)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2))

		// A host deactivated while its poll holds one: released too.
		ch = b.poll(b.ctx, p, 5)
		v = b.reservePoll(p)
		_, err := b.store.HostDeactivate(b.ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: b.clock.Now()})
		require.NoError(t, err)
		b.stillClosing(p, ch, "released when the insert settles")
		res, handed = b.sendLeased(v, "e-2")
		require.True(t, handed)
		got = <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries, "handed nothing")
		require.Equal(t, store.StatusRetrying, b.get(res.Delivery.ID).Status)
	})
}

// A webhook stored pending closes a waiting poll to reservations until it
// looked again, and that look answers with it: nothing stored after it is
// answered before it.
func TestPollNotPastAPendingOne(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		ch := b.poll(b.ctx, p, 10)
		b.reservePoll(p).Settle(nil, context.Canceled) // waiting with nothing found
		older := b.send()
		p.intake.Pending(b.host.ID)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "not past the pending one")
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, older, got.res.Deliveries[0].ID)
	})
}
