package storetest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

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
			select {
			case e := <-told:
				return e
			case <-time.After(10 * time.Second):
				t.Fatal("not told")
				return store.SocketEvent{}
			}
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
