package delivery_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// Two replicas' registries over one store, each fed by its own listener,
// keep one connection per host: a newer connection on one closes the
// other's, and opens only once that one is told closed.

type replica struct {
	conns *delivery.Connections
	stop  func()
}

func (b *bundle) replica(takeover time.Duration) *replica {
	b.t.Helper()
	return b.replicaOver(b.store, takeover)
}

// replicaOver is a replica whose registry opens and closes connections in
// st.
func (b *bundle) replicaOver(st delivery.SocketStore, takeover time.Duration) *replica {
	b.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := delivery.New(b.store, delivery.Config{}, b.clock, log)
	conns := delivery.NewConnections(st, b.clock, log, takeover)
	svc.OnSocket(conns.Observe)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.Listen(ctx, nil, nil) }()
	<-svc.Ready()
	r := &replica{conns: conns, stop: func() { cancel(); <-done }}
	b.t.Cleanup(r.stop)
	return r
}

// conn is a test connection: replaced is closed when the registry closes
// it, done when the test says it released what it carried.
type conn struct {
	replaced chan struct{}
	done     chan struct{}
	c        *delivery.Connection
	err      error
	opened   chan struct{}
}

func openAsync(ctx context.Context, r *replica, hostID string) *conn {
	c := &conn{replaced: make(chan struct{}), done: make(chan struct{}), opened: make(chan struct{})}
	go func() {
		defer close(c.opened)
		c.c, c.err = r.conns.Open(ctx, hostID, func() { close(c.replaced) }, c.done)
	}()
	return c
}

func (c *conn) waitOpened(t *testing.T) error {
	t.Helper()
	select {
	case <-c.opened:
		return c.err
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not return")
		return nil
	}
}

// release says c released what it carried, and closes it on r.
func (c *conn) release(r *replica) {
	close(c.done)
	r.conns.Close(c.c)
}

// stillOpening fails unless each of cs waits in Open for a connection it
// replaces, on another replica, to be released: once each has set its
// takeover timer on the clock (timers in all), and while nothing it waits
// for happened, none returned (opened, or given up as replaced).
func (b *bundle) stillOpening(timers int, cs ...*conn) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(b.t, b.clock.BlockUntilContext(ctx, timers), "Open waits for the connection it replaces")
	for _, c := range cs {
		select {
		case <-c.opened:
			b.t.Fatalf("Open returned (%v) before the connection it replaces was released", c.err)
		default:
		}
	}
}

func (c *conn) waitReplaced(t *testing.T) {
	t.Helper()
	select {
	case <-c.replaced:
	case <-time.After(10 * time.Second):
		t.Fatal("not replaced")
	}
}

func TestConnectionsAcrossReplicas(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		a, other := b.replica(time.Minute), b.replica(time.Minute)
		first := openAsync(b.ctx, a, b.host.ID)
		require.NoError(t, first.waitOpened(t))
		require.Equal(t, 1, a.conns.Count())

		// A newer connection on the other replica closes the first, and
		// waits until the first released what it carried.
		second := openAsync(b.ctx, other, b.host.ID)
		first.waitReplaced(t)
		b.stillOpening(1, second)
		first.release(a)
		require.NoError(t, second.waitOpened(t))
		require.Equal(t, 0, a.conns.Count())
		require.Equal(t, 1, other.conns.Count())

		// Back on the first replica: the same the other way.
		third := openAsync(b.ctx, a, b.host.ID)
		second.waitReplaced(t)
		second.release(other)
		require.NoError(t, third.waitOpened(t))

		// On the same replica, the older is closed and waited for at once.
		fourth := openAsync(b.ctx, a, b.host.ID)
		third.waitReplaced(t)
		third.release(a)
		require.NoError(t, fourth.waitOpened(t))
		require.Equal(t, 1, a.conns.Count())
	})
}

func TestConnectionsTakeoverIsBounded(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		a, other := b.replica(10*time.Second), b.replica(10*time.Second)
		stuck := openAsync(b.ctx, a, b.host.ID)
		require.NoError(t, stuck.waitOpened(t))
		// The older connection is told to close and never says it did:
		// the newer one opens once the takeover bound passed.
		next := openAsync(b.ctx, other, b.host.ID)
		stuck.waitReplaced(t)
		require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
		b.clock.Advance(10 * time.Second)
		require.NoError(t, next.waitOpened(t))
	})
}

func TestConnectionsReplacedWhileOpening(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		a, other, third := b.replica(time.Minute), b.replica(time.Minute), b.replica(time.Minute)
		first := openAsync(b.ctx, a, b.host.ID)
		require.NoError(t, first.waitOpened(t))
		// waiting waits for first; a newer connection on a third replica
		// takes over from waiting, which waits on for first all the same:
		// the newest opens only once both are closed, first before.
		waiting := openAsync(b.ctx, other, b.host.ID)
		first.waitReplaced(t)
		newest := openAsync(b.ctx, third, b.host.ID)
		waiting.waitReplaced(t)
		b.stillOpening(2, waiting, newest)
		first.release(a)
		require.ErrorIs(t, waiting.waitOpened(t), delivery.ErrReplaced)
		waiting.release(other)
		require.NoError(t, newest.waitOpened(t))
		require.Equal(t, 0, a.conns.Count())
		require.Equal(t, 0, other.conns.Count())
		require.Equal(t, 1, third.conns.Count())
	})
}

// announcing answers SocketOpen as its store does, and calls then what a
// listener might hear before the caller reads the answer.
type announcing struct {
	delivery.SocketStore
	then func(res *store.SocketOpenResult)
}

func (a announcing) SocketOpen(ctx context.Context, hostID string) (*store.SocketOpenResult, error) {
	res, err := a.SocketStore.SocketOpen(ctx, hostID)
	if err == nil {
		a.then(res)
	}
	return res, err
}

// A newer connection announced while an opening one had no epoch yet (the
// store answered, the registry had not read it) replaces it all the same:
// it is told so, and still waits for the one it replaces, elsewhere, to be
// released before it gives up.
func TestConnectionsReplacedBeforeTheirEpoch(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		a := b.replica(time.Minute)
		first := openAsync(b.ctx, a, b.host.ID)
		require.NoError(t, first.waitOpened(t))
		var other *replica
		other = b.replicaOver(announcing{SocketStore: b.store, then: func(res *store.SocketOpenResult) {
			other.conns.Observe(store.SocketEvent{HostID: b.host.ID, Epoch: res.Epoch + 1, Open: true})
		}}, time.Minute)
		waiting := openAsync(b.ctx, other, b.host.ID)
		first.waitReplaced(t)
		waiting.waitReplaced(t)
		b.stillOpening(1, waiting)
		first.release(a)
		require.ErrorIs(t, waiting.waitOpened(t), delivery.ErrReplaced)
		waiting.release(other)
		require.Equal(t, 0, a.conns.Count())
		require.Equal(t, 0, other.conns.Count())
	})
}

// The intake wakes a host's connection (Pending) and asks it for room
// (Reserve) while the connection may be beginning to push (Attach): each
// reads what Attach writes under the registry's lock alone. Under -race,
// as make test runs it, a read outside the lock fails this test.
func TestIntakeBesideAttach(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, _ := b.counted()
		conns := delivery.NewConnections(b.store, b.clock, slog.New(slog.DiscardHandler), time.Second)
		c, err := conns.Open(b.ctx, b.host.ID, func() {}, make(chan struct{}))
		require.NoError(t, err)
		t.Cleanup(func() { conns.Close(c) })
		in := delivery.NewIntake(conns, svc)
		var calls atomic.Int64
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				in.Pending(b.host.ID)
				if v := in.Reserve(b.host.ID, 2); v != nil {
					v.Settle(nil, errors.New("not stored"))
				}
				calls.Add(1)
			}
		}()
		for calls.Load() < 100 {
			runtime.Gosched()
		}
		conns.Attach(c, svc.NewOutbox())
		for seen := calls.Load(); calls.Load() < seen+100; {
			runtime.Gosched()
		}
		close(stop)
		<-done
	})
}
