package delivery_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// The core as a pushing connection drives it: NextPush leases as work comes
// within the room the host granted, and ConnectionLost hands back what a closed
// connection carried.

// countingStore counts the leases a connection's wait makes, and its
// looks at the host.
type countingStore struct {
	store.Store
	leases, hosts atomic.Int64
}

func (c *countingStore) HostGet(ctx context.Context, id string) (*store.Host, error) {
	c.hosts.Add(1)
	return c.Store.HostGet(ctx, id)
}

func (c *countingStore) DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error) {
	c.leases.Add(1)
	return c.Store.DeliveryLease(ctx, p)
}

type nextCall struct {
	outbox *delivery.Outbox
	done   chan leased
}

// nextAsync runs NextPush in the background with room, once it waits (or
// returned).
func (b *bundle) nextAsync(ctx context.Context, svc *delivery.Service, room int) *nextCall {
	return b.nextFrom(ctx, svc, svc.NewOutbox(), room)
}

// nextFrom is nextAsync with the outbox o, granted room more.
func (b *bundle) nextFrom(ctx context.Context, svc *delivery.Service, o *delivery.Outbox, room int) *nextCall {
	nc := &nextCall{outbox: o, done: make(chan leased, 1)}
	require.NoError(b.t, o.Grant(0, room))
	go func() {
		res, err := svc.NextPush(ctx, b.host, o)
		nc.done <- leased{res, err}
	}()
	require.Eventually(b.t, func() bool { return o.Waits() || len(nc.done) > 0 }, 10*time.Second, time.Millisecond)
	return nc
}

// observed counts what the core tells its observer.
type observed struct {
	exchanges, leased atomic.Int64
}

func (o *observed) Exchanged(string)            { o.exchanges.Add(1) }
func (o *observed) Leased(ds []*store.Delivery) { o.leased.Add(int64(len(ds))) }
func (o *observed) Acked([]string, time.Time)   {}

// counted is the bundle's service over a store that counts leases.
func (b *bundle) counted() (*delivery.Service, *countingStore) {
	svc, cs, _ := b.countedObserved()
	return svc, cs
}

func (b *bundle) countedObserved() (*delivery.Service, *countingStore, *observed) {
	return b.countedObservedParking(true)
}

// countedObservedParking is countedObserved with answered long polls
// parking from the start or not (delivery.Config.ParkPolls).
func (b *bundle) countedObservedParking(park bool) (*delivery.Service, *countingStore, *observed) {
	cs := &countingStore{Store: b.store}
	obs := &observed{}
	svc := delivery.New(cs, delivery.Config{LeaseFor: time.Minute, Observer: obs, ParkPolls: park}, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.Listen(ctx, nil, nil) }()
	b.t.Cleanup(func() { cancel(); <-done })
	<-svc.Ready()
	return svc, cs, obs
}

func TestServiceNextPushesWorkAsItComesWithinRoom(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, cs, obs := b.countedObserved()
		nc := b.nextAsync(b.ctx, svc, 2)
		b.clock.Advance(time.Hour)
		require.Equal(t, int64(1), cs.leases.Load(), "an idle connection makes no query while it waits")
		first, second := b.send(), b.send()
		b.send()
		got := <-nc.done
		require.NoError(t, got.err)
		ids := []string{}
		for _, d := range got.res.Deliveries {
			ids = append(ids, d.ID)
		}
		require.Subset(t, []string{first, second}, ids, "oldest first, at most the room")
		require.LessOrEqual(t, len(ids), 2)
		require.Equal(t, int64(len(ids)), obs.leased.Load(), "the metrics see a push as a heartbeat's lease")
		require.Equal(t, int64(1), obs.exchanges.Load())
		nc.outbox.Close() // that connection closes

		// No room: nothing is leased until the host grants some.
		nc = b.nextAsync(b.ctx, svc, 0)
		before, looks := cs.leases.Load(), cs.hosts.Load()
		b.send()
		// Woken by the store, the loop has no room to lease: it looks at
		// the host (gone?) and waits again.
		require.Eventually(t, func() bool { return cs.hosts.Load() > looks || len(nc.done) > 0 }, 10*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return nc.outbox.Idle() || len(nc.done) > 0 }, 10*time.Second, time.Millisecond)
		require.Empty(t, nc.done)
		require.Equal(t, before, cs.leases.Load())
		require.NoError(t, nc.outbox.Grant(0, 1))
		got = <-nc.done
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, 1, svc.Waiting(), "still subscribed, until the connection closes")
		nc.outbox.Close()
		require.Zero(t, svc.Waiting(), "unsubscribed")
	})
}

func TestServiceNextWaitsForARetryToComeDue(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, _ := b.counted()
		id := b.send()
		b.lease()
		b.report(delivery.Report{Nacks: []delivery.Nack{{ID: id, Retryable: true}}})
		nc := b.nextAsync(b.ctx, svc, 10)
		require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
		b.clock.Advance(30 * time.Second)
		got := <-nc.done
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1, "the retry after 30 s")
		require.Equal(t, 2, got.res.Deliveries[0].Attempts)
	})
}

func TestServiceNextEndsForAHostGoneAStopAndACallerGone(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, _ := b.counted()
		ctx, cancel := context.WithCancel(b.ctx)
		nc := b.nextAsync(ctx, svc, 10)
		cancel()
		require.ErrorIs(t, (<-nc.done).err, context.Canceled)

		stopped, _ := b.counted()
		nc = b.nextAsync(b.ctx, stopped, 10)
		stopped.StopWaiting()
		require.ErrorIs(t, (<-nc.done).err, delivery.ErrStopping)
		require.Zero(t, stopped.Waiting())

		nc = b.nextAsync(b.ctx, svc, 10)
		_, err := b.store.HostDeactivate(b.ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: b.clock.Now()})
		require.NoError(t, err)
		require.ErrorIs(t, (<-nc.done).err, delivery.ErrHostGone, "told at once by the store's change")

		// A host deactivated before the connection subscribed: caught by
		// its first look.
		o := svc.NewOutbox()
		require.NoError(t, o.Grant(0, 10))
		_, err = svc.NextPush(b.ctx, b.host, o)
		require.ErrorIs(t, err, delivery.ErrHostGone)
	})
}

func TestServiceLostHandsBackWhatAClosedConnectionCarried(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		acked, lost, other := b.send(), b.send(), b.send()
		require.Len(t, b.lease(), 3)
		b.report(delivery.Report{Acks: []string{acked}})
		ctx, cancel := context.WithCancel(b.ctx)
		cancel() // the connection is gone: recorded regardless
		n, err := b.svc.ConnectionLost(ctx, b.host.ID, []string{acked, lost})
		require.NoError(t, err)
		require.Equal(t, 1, n, "what the host reported is left alone")
		require.Equal(t, store.StatusAcked, b.get(acked).Status)
		d := b.get(lost)
		require.Equal(t, store.StatusRetrying, d.Status)
		require.Equal(t, 1, d.Attempts, "the attempt counts")
		require.Equal(t, b.clock.Now(), d.NextRetryAt.UTC(), "due again at once")
		require.Equal(t, store.StatusDelivered, b.get(other).Status, "only what the connection carried")
		evs, err := b.store.DeliveryEventList(b.ctx, lost)
		require.NoError(t, err)
		require.Equal(t, "the socket carrying it closed", evs[len(evs)-1].Reason)
		require.Equal(t, []string{lost}, b.lease(), "in the very next lease")
	})
}
