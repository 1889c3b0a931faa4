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
	"github.com/relaykit/relay/shared"
)

// A webhook stored for a host whose connection has room and waits with
// nothing to lease is stored leased to it and handed to its push loop: no
// lease of its own.

func TestOutboxCapsCredit(t *testing.T) {
	svc := delivery.New(nil, delivery.Config{}, nil, nil)
	o := svc.NewOutbox()
	require.Zero(t, o.Room(), "no room before the host grants some")
	require.NoError(t, o.Grant(0, 1_000_000))
	require.Equal(t, shared.MaxSocketCredit, o.Room(), "capped at max_webhooks' cap")
	o.SetPushed(100)
	require.NoError(t, o.Grant(100, 1))
	require.Equal(t, shared.MaxSocketCredit-100, o.Room(), "a lower credit takes back nothing granted")
	require.ErrorIs(t, o.Grant(101, 1), delivery.ErrCredit, "more received than pushed")
	require.ErrorIs(t, o.Grant(0, -1), delivery.ErrCredit)
}

// A host that hands deliveries back is stopping: its connection gets no
// room from then on, whatever its credit.
func TestOutboxHandingBackLeavesNoRoom(t *testing.T) {
	svc := delivery.New(nil, delivery.Config{}, nil, nil)
	o := svc.NewOutbox()
	require.NoError(t, o.Grant(0, 10))
	o.HandingBack()
	require.Zero(t, o.Room())
	require.NoError(t, o.Grant(0, 20))
	require.Zero(t, o.Room(), "credit granted later gives none either")
	require.True(t, (&delivery.Report{Nacks: []delivery.Nack{{ID: "a"}, {ID: "b", NotStarted: true}}}).HostStops())
	require.True(t, (&delivery.Report{Acks: []string{"a"}, Stopping: true}).HostStops())
	require.False(t, (&delivery.Report{Nacks: []delivery.Nack{{ID: "a", Retryable: true}}}).HostStops())
}

// pushing is a connection of the bundle's host, open in a registry, that
// pushes from outbox.
type pushing struct {
	conns  *delivery.Connections
	svc    *delivery.Service
	cs     *countingStore
	outbox *delivery.Outbox
	c      *delivery.Connection
}

func (b *bundle) pushing() *pushing {
	b.t.Helper()
	svc, cs := b.counted()
	conns := delivery.NewConnections(b.store, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second)
	c, err := conns.Open(b.ctx, b.host.ID, func() {}, make(chan struct{}))
	require.NoError(b.t, err)
	b.t.Cleanup(func() { conns.Close(c) })
	p := &pushing{conns: conns, svc: svc, cs: cs, outbox: svc.NewOutbox(), c: c}
	require.Nil(b.t, conns.Reserve(b.host.ID, 2), "not before it pushes")
	conns.Attach(c, p.outbox)
	return p
}

// reserve waits until the connection's push loop is idle and room is had.
func (b *bundle) reserve(p *pushing) *delivery.Reservation {
	b.t.Helper()
	var v *delivery.Reservation
	require.Eventually(b.t, func() bool { v = p.conns.Reserve(b.host.ID, 2); return v != nil }, 10*time.Second, time.Millisecond)
	return v
}

// sendLeased stores a new delivery with v's lease and settles v.
func (b *bundle) sendLeased(v *delivery.Reservation, eventID string) (*store.DeliveryInsertResult, bool) {
	b.t.Helper()
	res, err := b.store.DeliveryInsert(b.ctx, &store.DeliveryInsertParams{ID: "github:" + eventID, HostID: b.host.ID,
		Source: "github", EventID: eventID, RawBody: []byte(`{}`), ReceivedAt: b.clock.Now(), Lease: v.Lease()})
	require.NoError(b.t, err)
	return res, v.Settle(res, err)
}

// A push runs before the host's hand-back, which waits for it, or not at
// all.
func TestOutboxPushBeforeHandingBackOrNot(t *testing.T) {
	o := delivery.New(nil, delivery.Config{}, nil, nil).NewOutbox()
	entered, hold := make(chan struct{}), make(chan struct{})
	pushed := make(chan bool)
	go func() {
		pushed <- o.Push(func() {
			close(entered)
			<-hold
		})
	}()
	<-entered
	handedBack := make(chan struct{})
	go func() {
		o.HandingBack()
		close(handedBack)
	}()
	select {
	case <-handedBack:
		t.Fatal("the hand-back did not wait for the write under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	require.True(t, <-pushed)
	<-handedBack
	require.False(t, o.Push(func() { t.Fatal("written after the hand-back") }))
}

func TestReserveLeasesAtIntakeToAnIdleConnection(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.pushing()
		nc := b.nextFrom(b.ctx, p.svc, p.outbox, 1)
		v := b.reserve(p)
		require.Nil(t, p.conns.Reserve(b.host.ID, 2), "room for one: held")
		require.Zero(t, p.outbox.Room())
		res, handed := b.sendLeased(v, "e-pushed")
		require.True(t, handed)
		got := <-nc.done
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		d := got.res.Deliveries[0]
		require.Equal(t, res.Delivery.ID, d.ID)
		require.Equal(t, store.StatusDelivering, d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, []byte(`{}`), d.RawBody, "with its body, to be pushed")
		require.Equal(t, int64(1), p.cs.leases.Load(), "only the look before it waited: no lease for it")
		stored := b.get(d.ID)
		require.Equal(t, store.StatusDelivering, stored.Status)
		require.Equal(t, b.clock.Now().Add(time.Minute), stored.LeaseExpiresAt.UTC())
		require.False(t, v.Settle(res, nil), "settled once")

		// Handed out as a leased one is: delivered, then acked.
		p.svc.RecordWrite(b.ctx, b.host.ID, []string{d.ID}, nil)
		b.report(delivery.Report{Acks: []string{d.ID}})
		require.Equal(t, store.StatusAcked, b.get(d.ID).Status)
	})
}

func TestReserveGivesRoomBackUnlessLeased(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.pushing()
		dup := b.send()
		nc := b.nextFrom(b.ctx, p.svc, p.outbox, 2)
		got := <-nc.done // the backlog first, by a lease
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, dup, got.res.Deliveries[0].ID)
		require.NoError(t, p.outbox.Grant(1, 1))

		ctx, cancel := context.WithCancel(b.ctx)
		nc = b.nextFrom(ctx, p.svc, p.outbox, 0)
		v := b.reserve(p)
		require.Zero(t, p.outbox.Room())
		// A repeat of a stored event is not leased: the room comes back.
		res, handed := b.sendLeased(v, "e-1")
		require.Equal(t, store.InsertDuplicate, res.Outcome)
		require.False(t, handed)
		require.Equal(t, 1, p.outbox.Room())
		// Nor does a failed insert keep it.
		v = b.reserve(p)
		require.False(t, v.Settle(nil, errors.New("disk full")))
		require.Equal(t, 1, p.outbox.Room())
		require.Equal(t, store.StatusDelivering, b.get(dup).Status, "the duplicate left as it was")
		// The loop took both settles' pokes and waits on.
		require.Eventually(t, func() bool { return p.outbox.Idle() || len(nc.done) > 0 }, 10*time.Second, time.Millisecond)
		require.Empty(t, nc.done)
		cancel()
		require.ErrorIs(t, (<-nc.done).err, context.Canceled)
		var nilv *delivery.Reservation
		require.Nil(t, nilv.Lease(), "no room: stored pending")
		require.False(t, nilv.Settle(nil, nil))
	})
}

func TestReserveOnlyWhenCaughtUp(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.pushing()
		require.Nil(t, p.conns.Reserve(b.host.ID, 2), "no push loop waiting")
		older := b.send()
		// No room: the backlog waits, and so does the intake.
		nc := b.nextFrom(b.ctx, p.svc, p.outbox, 0)
		require.Eventually(t, p.outbox.Idle, 10*time.Second, time.Millisecond)
		require.Nil(t, p.conns.Reserve(b.host.ID, 2))
		// Room, but the loop has a backlog to lease first: it leases, oldest
		// first, rather than the intake jumping it.
		require.NoError(t, p.outbox.Grant(0, 5))
		got := <-nc.done
		require.NoError(t, got.err)
		require.Equal(t, older, got.res.Deliveries[0].ID)
		require.Nil(t, p.conns.Reserve(b.host.ID, 2), "the loop is not waiting")
		nc = b.nextFrom(b.ctx, p.svc, p.outbox, 0)
		v := b.reserve(p)
		_, handed := b.sendLeased(v, "e-new")
		require.True(t, handed)
		require.NoError(t, (<-nc.done).err)
	})
}

func TestOutboxCloseWaitsForInsertsAndHandsBack(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.pushing()
		ctx, cancel := context.WithCancel(b.ctx)
		nc := b.nextFrom(ctx, p.svc, p.outbox, 5)
		v := b.reserve(p)
		cancel() // the connection closes between the reservation and the commit
		require.ErrorIs(t, (<-nc.done).err, context.Canceled)
		closed := make(chan []string, 1)
		go func() { closed <- p.outbox.Close() }()
		require.Eventually(t, func() bool { return p.outbox.Closing() || len(closed) > 0 }, 10*time.Second, time.Millisecond)
		require.Empty(t, closed, "the close waits for the insert holding room")
		res, handed := b.sendLeased(v, "e-1")
		require.True(t, handed)
		ids := <-closed
		require.Equal(t, []string{res.Delivery.ID}, ids, "leased and never pushed: handed back")
		require.Nil(t, p.conns.Reserve(b.host.ID, 2), "no room after the close")
		// The connection's release: due again at once.
		n, err := p.svc.ConnectionLost(b.ctx, b.host.ID, ids)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []string{res.Delivery.ID}, b.lease())
		require.Empty(t, p.outbox.Close(), "once")
	})
}

func TestNextLooksAgainOnlyWhenSomethingMayBeAvailable(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, cs := b.counted()
		o := svc.NewOutbox()
		nc := b.nextFrom(b.ctx, svc, o, 1)
		require.Eventually(t, func() bool { return cs.leases.Load() == 1 }, 10*time.Second, time.Millisecond)
		// More room for a loop that found nothing and was not woken since
		// makes no query: the host's credit frames cost none.
		for range 3 {
			require.NoError(t, o.Grant(0, 5))
		}
		require.Eventually(t, func() bool { return o.Idle() || cs.leases.Load() > 1 }, 10*time.Second, time.Millisecond)
		require.Equal(t, int64(1), cs.leases.Load())
		// A poke (a nack moved a retry) does.
		o.Poke()
		require.Eventually(t, func() bool { return cs.leases.Load() == 2 }, 10*time.Second, time.Millisecond)
		id := b.send()
		got := <-nc.done
		require.NoError(t, got.err)
		require.Equal(t, id, got.res.Deliveries[0].ID, "woken by the store")
	})
}

// A webhook stored pending (no room was held for it) keeps the intake from
// leasing the next one to the connection until its push loop looked again:
// the host gets them in the order they were stored, even before the
// store's wake-up for the first reached the loop.
func TestReserveNotPastAPendingOne(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.pushing()
		in := delivery.NewIntake(p.conns, p.svc)
		nc := b.nextFrom(b.ctx, p.svc, p.outbox, 5)
		b.reserve(p).Settle(nil, context.Canceled) // caught up: room given back
		older := b.send()                          // stored pending, as when no room was had
		in.Pending(b.host.ID)
		require.Nil(t, in.Reserve(b.host.ID, 2), "not past the pending one")
		got := <-nc.done
		require.NoError(t, got.err)
		require.Equal(t, older, got.res.Deliveries[0].ID, "the loop looked at once")
		nc = b.nextFrom(b.ctx, p.svc, p.outbox, 0)
		_, handed := b.sendLeased(b.reserve(p), "e-new")
		require.True(t, handed, "caught up again: the next is leased at intake")
		require.NoError(t, (<-nc.done).err)
	})
}
