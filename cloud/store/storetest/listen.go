package storetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseListen covers the wake-ups of waiting heartbeats.
func exerciseListen(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryListen", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		woken, stop := listenWakeUps(ctx, t, s)
		marks := 0
		mark := func() {
			marks++
			insert(ctx, t, s, b.other.ID, fmt.Sprintf("mark-%d", marks), base, deliveryOpts{})
		}
		// next is the next wake-up; wake-ups come in commit order, so a mark
		// after an action shows that the action woke no one.
		next := func() string { t.Helper(); return nextWakeUp(t, woken) }

		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Equal(t, b.host.ID, next(), "received")

		_, err := s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-1", base.Add(time.Second), deliveryOpts{}))
		require.NoError(t, err)
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Retryable: false}))
		mark()
		require.Equal(t, b.other.ID, next(), "a duplicate, a lease and a nack wake no one")

		_, err = s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-1", base.Add(time.Minute), deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, b.host.ID, next(), "revived")

		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base.Add(time.Minute)), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base.Add(time.Minute), delivery.Nack{ID: d.ID, Retryable: true}))
		_, err = s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: d.ID, Now: base.Add(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, next(), "retried by an operator")

		// A batch wakes each of its hosts once, and a duplicate in it no one.
		_, err = s.DeliveryInsertBatch(ctx, []*store.DeliveryInsertParams{
			insertParams(b.host.ID, "evt-1", base.Add(2*time.Minute), deliveryOpts{}),
			insertParams(b.host.ID, "evt-2", base.Add(2*time.Minute), deliveryOpts{}),
			insertParams(b.other.ID, "evt-2", base.Add(2*time.Minute+time.Millisecond), deliveryOpts{}),
			insertParams(b.host.ID, "evt-3", base.Add(2*time.Minute), deliveryOpts{}),
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{b.host.ID, b.other.ID}, []string{next(), next()})
		mark()
		require.Equal(t, b.other.ID, next(), "each host once")

		// Released, or expired before its answer was written: due again at
		// once. An expiry into a delayed retry wakes no one.
		leased := lease(ctx, t, s, b.host.ID, 2, 0, base.Add(3*time.Minute))
		require.Len(t, leased, 2)
		n, err := s.DeliveryRelease(ctx, delivery.ReleaseParams(b.host.ID, ids(leased[:1]), delivery.RetryPolicy{}, base.Add(3*time.Minute)))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, b.host.ID, next(), "released")
		handed := handOut(ctx, t, s, b.other.ID, 10, 0, base.Add(3*time.Minute))
		require.NotEmpty(t, handed)
		require.Equal(t, 1+len(handed), expire(ctx, t, s, delivery.RetryPolicy{}, base.Add(3*time.Minute+2*leaseFor)))
		mark()
		require.Equal(t, b.host.ID, next(), "expired unwritten")
		require.Equal(t, b.other.ID, next(), "the mark: expiries into a retry woke no one")

		require.NoError(t, stop(), "ending the context ends the listener cleanly")
	})

	t.Run("HostStopping", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		stopping, woken := make(chan string, 10), make(chan string, 10)
		listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(hostID string) { woken <- hostID },
			Stopping:  func(hostID string) { stopping <- hostID },
		})
		require.NoError(t, s.HostStopping(ctx, b.host.ID))
		require.Equal(t, b.host.ID, nextWakeUp(t, stopping), "told, its own process included")
		require.NoError(t, s.HostStopping(ctx, b.other.ID))
		require.Equal(t, b.other.ID, nextWakeUp(t, stopping))
		require.Empty(t, woken, "no work is said to be available")
		h, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, store.HostActive, h.Status, "stored nowhere")
	})

	t.Run("DeliveryNextRetryAt", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		next, err := s.DeliveryNextRetryAt(ctx, b.host.ID)
		require.NoError(t, err)
		require.Nil(t, next)
		d1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		d2 := insert(ctx, t, s, b.host.ID, "evt-2", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 2)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base.Add(time.Minute), delivery.Nack{ID: d1.ID, Retryable: true}))
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d2.ID, Retryable: true}))
		next, err = s.DeliveryNextRetryAt(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, ptr(base.Add(delivery.DefaultRetryPolicy.Delays[1])), next, "the earliest")
		next, err = s.DeliveryNextRetryAt(ctx, b.other.ID)
		require.NoError(t, err)
		require.Nil(t, next)
	})
}

// nextWakeUp is the host of the next wake-up on woken (a listener's
// Available); it fails t after 10 s without one.
func nextWakeUp(t testing.TB, woken <-chan string) string {
	t.Helper()
	return receive(t, woken, "no wake-up")
}

// receive is the next value on ch; it fails t with failure after 10 s
// without one.
func receive[T any](t testing.TB, ch <-chan T, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

// exerciseSockets covers the record of hosts' sockets: epochs in the order
// sockets open, the one replaced while its process listens, and every
// listener told of each open and close in commit order.
func exerciseSockets(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("Sockets", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		told := make(chan store.SocketEvent, 100)
		stop := listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(string) {},
			Socket:    func(e store.SocketEvent) { told <- e },
		})
		defer func() { require.NoError(t, stop()) }()
		next := func() store.SocketEvent {
			t.Helper()
			return receive(t, told, "not told")
		}

		first, err := s.SocketOpen(ctx, b.host.ID)
		require.NoError(t, err)
		require.Positive(t, first.Epoch)
		require.Zero(t, first.Replaced, "the host's first socket replaces none")
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: first.Epoch, Open: true}, next())

		second, err := s.SocketOpen(ctx, b.host.ID)
		require.NoError(t, err)
		require.Greater(t, second.Epoch, first.Epoch)
		require.Equal(t, first.Epoch, second.Replaced, "open in a process that listens")
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: second.Epoch, Open: true}, next())

		other, err := s.SocketOpen(ctx, b.other.ID)
		require.NoError(t, err)
		require.Greater(t, other.Epoch, second.Epoch, "one sequence for every host")
		require.Zero(t, other.Replaced)
		require.Equal(t, store.SocketEvent{HostID: b.other.ID, Epoch: other.Epoch, Open: true}, next())

		// The replaced socket closing leaves the newer one recorded.
		require.NoError(t, s.SocketClose(ctx, b.host.ID, first.Epoch))
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: first.Epoch}, next())
		third, err := s.SocketOpen(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, second.Epoch, third.Replaced)
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: third.Epoch, Open: true}, next())

		require.NoError(t, s.SocketClose(ctx, b.host.ID, third.Epoch))
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: third.Epoch}, next())
		fourth, err := s.SocketOpen(ctx, b.host.ID)
		require.NoError(t, err)
		require.Zero(t, fourth.Replaced, "closed")
		require.Equal(t, store.SocketEvent{HostID: b.host.ID, Epoch: fourth.Epoch, Open: true}, next())
	})

	t.Run("SocketsOpenAtOnce", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		stop := listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(string) {},
			Socket:    func(store.SocketEvent) {},
		})
		defer func() { require.NoError(t, stop()) }()
		// Sockets of one host opening at once: distinct epochs, and each
		// replaces exactly the one recorded before it (the first none).
		const n = 8
		results := make([]*store.SocketOpenResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				res, err := s.SocketOpen(ctx, b.host.ID)
				require.NoError(t, err)
				results[i] = res
			})
		}
		wg.Wait()
		slices.SortFunc(results, func(a, b *store.SocketOpenResult) int { return cmp.Compare(a.Epoch, b.Epoch) })
		require.Zero(t, results[0].Replaced)
		for i := 1; i < n; i++ {
			require.Greater(t, results[i].Epoch, results[i-1].Epoch)
			require.Equal(t, results[i-1].Epoch, results[i].Replaced, "each replaces the one before it")
		}
	})
	t.Run("SocketOpensWhileTheOldCloses", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// A socket opening while the one recorded before it closes (its
		// row deleted between the open's look and its lock) still opens:
		// it replaces the old one or, once that is gone, none.
		for range 100 {
			old, err := s.SocketOpen(ctx, b.host.ID)
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Go(func() { require.NoError(t, s.SocketClose(ctx, b.host.ID, old.Epoch)) })
			res, err := s.SocketOpen(ctx, b.host.ID)
			wg.Wait()
			require.NoError(t, err)
			require.Greater(t, res.Epoch, old.Epoch)
			require.NoError(t, s.SocketClose(ctx, b.host.ID, res.Epoch))
		}
	})
}
