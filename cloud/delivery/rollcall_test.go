package delivery_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
)

// Replicas sharing a store park answered long polls while the roll call
// finds one replica alone: a second one's lease stops it, and parking
// comes back when that one leaves or its lease runs out unrenewed.
func TestRollCallParksWhileAlone(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		p := b.pollingParking(false)
		// An answered poll (of a host whose next poll may go elsewhere)
		// parks only where the roll call says so.
		parks := func() bool {
			b.answeredPoll(p)
			return p.svc.Parked(b.host.ID)
		}
		require.False(t, parks(), "before any roll call")

		a := delivery.NewRollCall(b.store, p.svc, b.clock, log)
		require.Zero(t, a.Counted())
		a.Call(b.ctx)
		require.True(t, parks(), "alone")
		require.Equal(t, 1, a.Counted())

		other := delivery.New(b.store, delivery.Config{}, b.clock, log)
		o := delivery.NewRollCall(b.store, other, b.clock, log)
		o.Call(b.ctx)
		a.Call(b.ctx)
		require.False(t, parks(), "another replica holds a lease")
		require.Equal(t, 2, a.Counted())

		o.Leave(b.ctx)
		a.Call(b.ctx)
		require.True(t, parks(), "it left")

		o.Call(b.ctx)
		a.Call(b.ctx)
		require.False(t, parks())
		// The other stops without leaving: its lease runs out.
		b.clock.Advance(delivery.RollCallFor - delivery.RollCallEvery)
		a.Call(b.ctx)
		require.False(t, parks(), "its lease still runs")
		b.clock.Advance(delivery.RollCallEvery)
		a.Call(b.ctx)
		require.True(t, parks(), "its lease ran out")

		// Run calls at once, and leaves when its context ends.
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan struct{})
		go func() { defer close(done); o.Run(ctx) }()
		require.Eventually(t, func() bool {
			a.Call(b.ctx)
			return !parks()
		}, 10*time.Second, time.Millisecond)
		cancel()
		<-done
		a.Call(b.ctx)
		require.True(t, parks(), "left when it stopped")
	})
}
