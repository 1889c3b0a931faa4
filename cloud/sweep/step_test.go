package sweep

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/slewclock"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

// TestLeaseExpiryThroughAClockStep: ten deliveries leased 10 s apart for
// 2 min, then the system clock steps 5 min forward or back. Read straight
// from the wall clock, a step forward expires all ten in one pass and a
// step back holds every expiry for 5 min; on the cloud's clock (package
// slewclock) they expire one by one, in order, within the lease's length
// give or take Rate.
func TestLeaseExpiryThroughAClockStep(t *testing.T) {
	for _, step := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		for _, mode := range []string{"wall", "steady"} {
			t.Run(fmt.Sprintf("%s/%v", mode, step), func(t *testing.T) {
				expiries := leaseExpiries(t, step, mode == "steady")
				require.Len(t, expiries, 10)
				first, last := expiries[0], expiries[9]
				switch {
				case mode == "wall" && step > 0:
					require.Equal(t, first, last, "all at once")
				case mode == "wall":
					require.Greater(t, first, 5*time.Minute, "stalled for the step")
				default:
					// Leased at 0..90 s for 2 min, the step at 100 s: a lease
					// lasts between 1/(1+Rate) and 1/(1-Rate) of its length,
					// give or take the 10 s between two readings of the clock
					// (a step is absorbed from the reading before it).
					require.Greater(t, first, 101*time.Second, "none expires at the step")
					for i, at := range expiries {
						leased := time.Duration(i) * 10 * time.Second
						require.GreaterOrEqual(t, at-leased, 80*time.Second-10*time.Second)
						require.LessOrEqual(t, at-leased, 4*time.Minute+10*time.Second)
						if i > 0 {
							require.Greater(t, at, expiries[i-1], "one at a time, in order")
						}
					}
				}
			})
		}
	}
}

// leaseExpiries returns when (real time since the first lease) each of ten
// leases expired, with lease expiry run every second on the chosen clock.
func leaseExpiries(t *testing.T, step time.Duration, steadyClock bool) []time.Duration {
	ctx := context.Background()
	st := sqlitetest.Open(t)

	real := clockwork.NewFakeClockAt(start)
	var mu sync.Mutex
	var stepped time.Duration
	wall := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return real.Now().Add(stepped)
	}
	now := wall
	if steadyClock {
		c := slewclock.NewWith(real, wall, func() time.Duration { return real.Since(start) }, discard())
		now = c.Now
	}
	at := func() time.Time { return now().UTC().Truncate(time.Millisecond) }

	_, err := st.HostCreate(ctx, &store.HostCreateParams{ID: "h1", Name: "h1", ClaimCodeHash: []byte("c"), ClaimExpiresAt: start.Add(time.Hour), Now: at()})
	require.NoError(t, err)
	for i := range 10 {
		insert(t, st, fmt.Sprintf("e%d", i), at())
		leased, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h1", Max: 1, MaxBytes: 1 << 20, LeaseFor: 2 * time.Minute, Now: at()})
		require.NoError(t, err)
		require.Len(t, leased.Deliveries, 1)
		real.Advance(10 * time.Second)
	}
	mu.Lock()
	stepped = step
	mu.Unlock()

	job := ExpireLeases(st, delivery.DefaultRetryPolicy, nil)
	var expiries []time.Duration
	for len(expiries) < 10 && real.Since(start) < 20*time.Minute {
		real.Advance(time.Second)
		n, err := job.Do(ctx, at())
		require.NoError(t, err)
		for range n {
			expiries = append(expiries, real.Since(start))
		}
	}
	return expiries
}
