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

// leaseN leases n deliveries without marking them: a connection's push.
func leaseN(t *testing.T, b *bundle, svc *delivery.Service, n int) []string {
	t.Helper()
	for range n {
		b.send()
	}
	res, err := svc.Lease(b.ctx, b.host, n, 0)
	require.NoError(t, err)
	require.Len(t, res.Deliveries, n)
	ids := make([]string, n)
	for i, d := range res.Deliveries {
		ids[i] = d.ID
	}
	return ids
}

// trail is a delivery's audit trail as from → to steps, with their times.
func trail(t *testing.T, b *bundle, id string) []store.DeliveryEvent {
	t.Helper()
	evs, err := b.store.DeliveryEventList(b.ctx, id)
	require.NoError(t, err)
	out := make([]store.DeliveryEvent, len(evs))
	for i, e := range evs {
		out[i] = store.DeliveryEvent{At: e.At, From: e.From, To: e.To}
	}
	return out
}

func TestMarkerMarksWhatStaysUnreportedAfterMarkAfter(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		ids := leaseN(t, b, b.svc, 3)
		m := b.svc.NewMarker(b.host.ID)
		first := b.clock.Now()
		m.Add(ids[:2])
		b.clock.Advance(delivery.MarkAfter / 2)
		m.Add(ids[2:])
		for _, id := range ids {
			require.Equal(t, store.StatusDelivering, b.get(id).Status, "not marked at once")
		}

		b.clock.Advance(delivery.MarkAfter / 2) // the first two are due
		require.Eventually(t, func() bool { return b.get(ids[1]).Status == store.StatusDelivered }, 10*time.Second, time.Millisecond)
		require.Equal(t, store.StatusDelivered, b.get(ids[0]).Status)
		require.Equal(t, ptr(first), b.get(ids[0]).DeliveredAt, "delivered when written")
		require.Equal(t, store.StatusDelivering, b.get(ids[2]).Status, "written later: not due yet")

		b.clock.Advance(delivery.MarkAfter / 2)
		require.Eventually(t, func() bool { return b.get(ids[2]).Status == store.StatusDelivered }, 10*time.Second, time.Millisecond)
		require.Equal(t, ptr(first.Add(delivery.MarkAfter/2)), b.get(ids[2]).DeliveredAt)
	})
}

func TestMarkerLeavesTheMarkOfWhatIsAckedToTheAck(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		ids := leaseN(t, b, b.svc, 4)
		acked, nacked, extended, later := ids[0], ids[1], ids[2], ids[3]
		m := b.svc.NewMarker(b.host.ID)
		written := b.clock.Now()
		m.Add(ids)
		b.clock.Advance(100 * time.Millisecond)
		reported := b.clock.Now()

		r := delivery.Report{Acks: []string{acked}, Nacks: []delivery.Nack{{ID: nacked, Error: "503", Retryable: true}}, Extends: []string{extended}}
		r.Unmarked = m.Take(r.Acks, []string{nacked, extended})
		require.Equal(t, []store.Written{{ID: acked, At: written}}, r.Unmarked)
		for _, id := range []string{nacked, extended} {
			require.Equal(t, store.StatusDelivered, b.get(id).Status, "marked before the report moves it on")
		}
		require.Equal(t, store.StatusDelivering, b.get(acked).Status)
		b.report(r)

		require.Equal(t, []store.DeliveryEvent{
			{At: written, From: "", To: store.StatusQueued},
			{At: written, From: store.StatusQueued, To: store.StatusDelivering},
			{At: written, From: store.StatusDelivering, To: store.StatusDelivered},
			{At: reported, From: store.StatusDelivered, To: store.StatusAcked},
		}, trail(t, b, acked), "the trail a heartbeat's would have")
		require.Equal(t, ptr(written), b.get(acked).DeliveredAt)
		require.Equal(t, store.StatusRetrying, b.get(nacked).Status)

		// The rest is marked in time; the acked one is not marked again.
		b.clock.Advance(delivery.MarkAfter)
		require.Eventually(t, func() bool { return b.get(later).Status == store.StatusDelivered }, 10*time.Second, time.Millisecond)
		require.Len(t, trail(t, b, acked), 4)
	})
}

func TestMarkerTakeWaitsForTheMarkInFlight(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		gs := &gatedStore{Store: b.store, gate: make(chan struct{})}
		svc := delivery.New(gs, delivery.Config{LeaseFor: time.Minute}, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ids := leaseN(t, b, svc, 1)
		m := svc.NewMarker(b.host.ID)
		m.Add(ids)
		b.clock.Advance(delivery.MarkAfter)
		require.Eventually(t, func() bool { return gs.marks.Load() == 1 }, 10*time.Second, time.Millisecond)

		taken := make(chan []store.Written, 1)
		go func() { taken <- m.Take(ids, nil) }()
		require.Eventually(t, func() bool { return m.TakeWaits() || len(taken) > 0 }, 10*time.Second, time.Millisecond)
		require.Empty(t, taken, "Take returned while a mark of its ack was in flight")
		close(gs.gate)
		require.Empty(t, <-taken, "marked already: the ack has nothing to record")
		require.Equal(t, store.StatusDelivered, b.get(ids[0]).Status)
	})
}

func TestMarkerFlushMarksEverythingAtOnce(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		ids := leaseN(t, b, b.svc, 2)
		m := b.svc.NewMarker(b.host.ID)
		m.Add(ids[:1])
		b.clock.Advance(time.Millisecond)
		m.Add(ids[1:])
		m.Flush()
		for _, id := range ids {
			require.Equal(t, store.StatusDelivered, b.get(id).Status)
		}
		m.Flush() // nothing pending: at once

		// A report that failed gives back what it took.
		more := leaseN(t, b, b.svc, 1)
		m.Add(more)
		written := m.Take(more, nil)
		require.Len(t, written, 1)
		m.Restore(written)
		m.Flush()
		require.Equal(t, store.StatusDelivered, b.get(more[0]).Status)
	})
}

func ptr[T any](v T) *T { return &v }
