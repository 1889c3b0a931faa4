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

// gatedStore holds each mark-delivered until the test lets it through,
// and counts them.
type gatedStore struct {
	store.Store
	marks atomic.Int64
	gate  chan struct{}
}

func (g *gatedStore) DeliveryMarkDelivered(ctx context.Context, p *store.DeliveryMarkDeliveredParams) (int, error) {
	g.marks.Add(1)
	<-g.gate
	return g.Store.DeliveryMarkDelivered(ctx, p)
}

func TestMarkerMarksWhatWasWrittenWhileOneCommitsInOneMore(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		gs := &gatedStore{Store: b.store, gate: make(chan struct{})}
		svc := delivery.New(gs, delivery.Config{LeaseFor: time.Minute}, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
		for range 3 {
			b.send()
		}
		res, err := svc.Lease(b.ctx, b.host, 10, 0)
		require.NoError(t, err)
		require.Len(t, res.Deliveries, 3)
		ids := []string{res.Deliveries[0].ID, res.Deliveries[1].ID, res.Deliveries[2].ID}

		m := svc.NewMarker(b.host.ID)
		m.Add(ids[:1]) // starts its mark at once, held at the gate
		require.Eventually(t, func() bool { return gs.marks.Load() == 1 }, 10*time.Second, time.Millisecond)
		m.Add(ids[1:2]) // written while the first commits
		m.Add(ids[2:])
		flushed := make(chan struct{})
		go func() { defer close(flushed); m.Flush() }()
		select {
		case <-flushed:
			t.Fatal("Flush returned before the marks committed")
		case <-time.After(20 * time.Millisecond):
		}
		close(gs.gate) // let every mark through
		<-flushed
		require.EqualValues(t, 2, gs.marks.Load(), "the two pushes written meanwhile marked in one transaction")
		for _, id := range ids {
			require.Equal(t, store.StatusDelivered, b.get(id).Status)
			evs, err := b.store.DeliveryEventList(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StatusDelivered, evs[len(evs)-1].To, "each gets its own audit event")
		}
		m.Flush() // nothing pending: at once
	})
}

func TestMarkerFlushWaitsOnlyForWhatWasAddedBeforeIt(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		gs := &gatedStore{Store: b.store, gate: make(chan struct{})}
		svc := delivery.New(gs, delivery.Config{LeaseFor: time.Minute}, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
		b.send()
		b.send()
		res, err := svc.Lease(b.ctx, b.host, 10, 0)
		require.NoError(t, err)
		require.Len(t, res.Deliveries, 2)
		first, second := res.Deliveries[0].ID, res.Deliveries[1].ID

		m := svc.NewMarker(b.host.ID)
		m.Add([]string{first})
		require.Eventually(t, func() bool { return gs.marks.Load() == 1 }, 10*time.Second, time.Millisecond)
		target := m.Added()     // a Flush now waits for this many
		m.Add([]string{second}) // written while it waits: must not hold it
		flushed := make(chan struct{})
		go func() { defer close(flushed); m.FlushTo(target) }()
		gs.gate <- struct{}{} // the first mark commits
		select {
		case <-flushed:
		case <-time.After(10 * time.Second):
			t.Fatal("Flush waited for a push added after it")
		}
		require.Equal(t, store.StatusDelivered, b.get(first).Status)
		gs.gate <- struct{}{} // the second
		m.Flush()
		require.Equal(t, store.StatusDelivered, b.get(second).Status)
	})
}
