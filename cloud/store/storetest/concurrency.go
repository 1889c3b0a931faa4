package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// --- concurrency ---

func exerciseConcurrency(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseConcurrently", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const total, workers = 2000, 8
		want := make(map[string]bool, total)
		// Insert from a few goroutines too: inserts must not collide either.
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, total)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < total; i += 4 {
					p := insertParams(b.host.ID, fmt.Sprintf("evt-%04d", i), base.Add(time.Duration(i)*time.Millisecond), deliveryOpts{})
					res, err := s.DeliveryInsert(ctx, p)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					want[res.Delivery.ID] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, want, total)
		insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})

		// All leases are taken at the same instant and stay valid, so no
		// delivery may be handed out twice.
		now := base.Add(time.Hour)
		got := make(map[string]int, total)
		var batches int
		errs = make(chan error, total+workers)
		for range workers {
			wg.Go(func() {
				for {
					res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: b.host.ID, Max: 7, MaxBytes: 1 << 20, LeaseFor: time.Hour, Now: now})
					if err != nil {
						errs <- err
						return
					}
					ds := res.Deliveries
					if len(ds) == 0 {
						return
					}
					mu.Lock()
					batches++
					if len(ds) > 7 {
						errs <- fmt.Errorf("a batch of %d over Max 7", len(ds))
					}
					for _, d := range ds {
						got[d.ID]++
						if d.HostID != b.host.ID {
							errs <- fmt.Errorf("leased %s of host %s", d.ID, d.HostID)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, got, total)
		for id, n := range got {
			require.True(t, want[id], id)
			require.Equal(t, 1, n, "%s leased %d times", id, n)
		}
		require.GreaterOrEqual(t, batches, total/7, "no batch over Max")

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, total, counts[store.StatusDelivering])
		require.Empty(t, lease(ctx, t, s, b.host.ID, 100, 0, now))
		other, err := s.DeliveryCountByStatus(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, 1, other[store.StatusQueued])
	})
}

// listen runs s.DeliveryListen with p until stop is called or the test
// ends, and returns once it listens (p.Listening is its own); stop ends it
// and returns what DeliveryListen returned.
