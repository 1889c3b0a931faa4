package delivery_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// A written long-poll answer's mark waits for the ack of the host's next
// poll (Config.DeferPollMarks): the ack records it, at the time it was
// written, and no mark of its own is made.

// deferring is a service over a gated store (its marks counted; the gate
// open) that puts the marks of long-poll answers off.
func (b *bundle) deferring() (*delivery.Service, *gatedStore) { return b.deferringFromStart(true) }

// deferringFromStart is deferring with the marks put off from the start
// (Config.DeferPollMarks) or only while a roll call finds it alone.
func (b *bundle) deferringFromStart(deferMarks bool) (*delivery.Service, *gatedStore) {
	gs := &gatedStore{Store: b.store, gate: make(chan struct{})}
	close(gs.gate)
	return delivery.New(gs, delivery.Config{LeaseFor: time.Minute, DeferPollMarks: deferMarks}, b.clock,
		slog.New(slog.NewTextHandler(io.Discard, nil))), gs
}

// answer is one poll of at most n, written to the host.
func (b *bundle) answer(svc *delivery.Service, n int, r delivery.Report) []string {
	b.t.Helper()
	res, err := svc.Heartbeat(b.ctx, b.host, &delivery.Heartbeat{Report: r, Max: n})
	require.NoError(b.t, err)
	var ids []string
	for _, d := range res.Deliveries {
		ids = append(ids, d.ID)
	}
	svc.Writing(b.host.ID, ids)
	svc.RecordWrite(b.ctx, b.host.ID, ids, nil)
	return ids
}

func TestPollAnswerMarkedByTheNextPollsAck(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, gs := b.deferring()
		b.send()
		b.send()
		written := b.clock.Now()
		ids := b.answer(svc, 2, delivery.Report{})
		require.Len(t, ids, 2)
		for _, id := range ids {
			require.Equal(t, store.StatusDelivering, b.get(id).Status, "not marked at once")
		}
		b.clock.Advance(100 * time.Millisecond)
		acked := b.clock.Now()

		// The next poll acks one and nacks the other.
		b.answer(svc, 2, delivery.Report{Acks: ids[:1], Nacks: []delivery.Nack{{ID: ids[1], Error: "503", Retryable: true}}})
		require.Equal(t, []store.DeliveryEvent{
			{At: written, From: "", To: store.StatusQueued},
			{At: written, From: store.StatusQueued, To: store.StatusDelivering},
			{At: written, From: store.StatusDelivering, To: store.StatusDelivered},
			{At: acked, From: store.StatusDelivered, To: store.StatusAcked},
		}, trail(t, b, ids[0]), "the trail an answer marked at once would have")
		require.Equal(t, ptr(written), b.get(ids[0]).DeliveredAt)
		require.Equal(t, int64(1), gs.marks.Load(), "the nacked one marked first, the acked one by its ack")
		nacked := trail(t, b, ids[1])
		require.Equal(t, store.StatusDelivered, nacked[2].To)
		require.Equal(t, store.StatusRetrying, b.get(ids[1]).Status)

		// Nothing is left to mark: stopping, which makes every mark put
		// off and waits for them, makes none.
		b.clock.Advance(delivery.MarkAfter)
		svc.StopWaiting()
		require.Equal(t, int64(1), gs.marks.Load())
	})
}

// An answer whose host does not poll again is marked MarkAfter after its
// write, and when the service stops, at once.
func TestPollAnswerMarkedWhenNoPollCame(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, _ := b.deferring()
		b.send()
		written := b.clock.Now()
		first := b.answer(svc, 1, delivery.Report{})
		b.clock.Advance(delivery.MarkAfter)
		require.Eventually(t, func() bool { return b.get(first[0]).Status == store.StatusDelivered }, 10*time.Second, time.Millisecond)
		require.Equal(t, ptr(written), b.get(first[0]).DeliveredAt)

		b.send()
		second := b.answer(svc, 1, delivery.Report{})
		require.Equal(t, store.StatusDelivering, b.get(second[0]).Status)
		svc.StopWaiting()
		require.Equal(t, store.StatusDelivered, b.get(second[0]).Status, "marked as the service stops")
	})
}

// A host that lost an answer holds none of it: its marks are made before
// the report releases what it does not hold, so the trail says delivered,
// then released.
func TestPollAnswerLostMarkedThenReleased(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, _ := b.deferring()
		b.send()
		ids := b.answer(svc, 1, delivery.Report{})
		b.clock.Advance(10 * time.Millisecond)
		again := b.answer(svc, 1, delivery.Report{AnswerLost: true})
		require.Equal(t, ids, again, "due again at once, in the same answer")
		steps := trail(t, b, ids[0])
		var tos []store.Status
		for _, s := range steps {
			tos = append(tos, s.To)
		}
		require.Equal(t, []store.Status{store.StatusQueued, store.StatusDelivering, store.StatusDelivered,
			store.StatusRetrying, store.StatusDelivering}, tos[:5])
	})
}

// An answer that could not be written is released, and its marks are
// dropped: it never reached the host.
func TestPollAnswerNotWrittenIsNotMarked(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		svc, gs := b.deferring()
		b.send()
		res, err := svc.Heartbeat(b.ctx, b.host, &delivery.Heartbeat{Max: 1})
		require.NoError(t, err)
		ids := []string{res.Deliveries[0].ID}
		svc.Writing(b.host.ID, ids)
		svc.RecordWrite(b.ctx, b.host.ID, ids, errors.New("broken pipe"))
		svc.StopWaiting() // makes every mark still put off
		require.Zero(t, gs.marks.Load())
		require.NotContains(t, []store.Status{store.StatusDelivering, store.StatusDelivered}, b.get(ids[0]).Status, "released")
		for _, e := range trail(t, b, ids[0]) {
			require.NotEqual(t, store.StatusDelivered, e.To)
		}
	})
}

// Replicas sharing a store put the marks off while the roll call finds
// one alone, and a replica that finds another makes every mark it put
// off at once, before the other can take an ack of those deliveries.
func TestPollMarksPutOffWhileTheRollCallFindsOneAlone(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, gs := b.deferringFromStart(false)
		status := func(ids []string) store.Status {
			t.Helper()
			require.Len(t, ids, 1)
			return b.get(ids[0]).Status
		}
		b.send()
		require.Equal(t, store.StatusDelivered, status(b.answer(svc, 1, delivery.Report{})), "marked at once before any roll call")
		require.Equal(t, int64(1), gs.marks.Load())

		a := delivery.NewRollCall(b.store, svc, b.clock, log)
		a.Call(b.ctx)
		b.send()
		written := b.clock.Now()
		putOff := b.answer(svc, 1, delivery.Report{})
		require.Equal(t, store.StatusDelivering, status(putOff), "alone: put off")
		require.Equal(t, int64(1), gs.marks.Load())

		// Another replica comes: the mark put off is made at this
		// replica's next call, at the time of the write, with no time
		// passing.
		other := delivery.New(b.store, delivery.Config{}, b.clock, log)
		delivery.NewRollCall(b.store, other, b.clock, log).Call(b.ctx)
		a.Call(b.ctx)
		require.Equal(t, store.StatusDelivered, status(putOff), "made when another replica came")
		require.Equal(t, ptr(written), b.get(putOff[0]).DeliveredAt)
		require.Equal(t, int64(2), gs.marks.Load())

		b.send()
		require.Equal(t, store.StatusDelivered, status(b.answer(svc, 1, delivery.Report{})), "not alone: marked at once")
	})
}

// An answer whose mark was put off is marked all the same when the roll
// call finds another replica between its Writing and its RecordWrite,
// and one whose mark was not put off is marked at once when marks are
// put off by then.
func TestPollMarkDecidedByWhatWritingDid(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, _ := b.deferringFromStart(false)
		a := delivery.NewRollCall(b.store, svc, b.clock, log)
		lease := func() []string {
			t.Helper()
			b.send()
			res, err := svc.Heartbeat(b.ctx, b.host, &delivery.Heartbeat{Max: 1})
			require.NoError(t, err)
			require.Len(t, res.Deliveries, 1)
			return []string{res.Deliveries[0].ID}
		}

		// Not put off at Writing; put off by RecordWrite.
		ids := lease()
		svc.Writing(b.host.ID, ids)
		a.Call(b.ctx)
		svc.RecordWrite(b.ctx, b.host.ID, ids, nil)
		require.Equal(t, store.StatusDelivered, b.get(ids[0]).Status)

		// Put off at Writing; another replica came by RecordWrite.
		ids = lease()
		svc.Writing(b.host.ID, ids)
		other := delivery.New(b.store, delivery.Config{}, b.clock, log)
		delivery.NewRollCall(b.store, other, b.clock, log).Call(b.ctx)
		a.Call(b.ctx)
		svc.RecordWrite(b.ctx, b.host.ID, ids, nil)
		require.Equal(t, store.StatusDelivered, b.get(ids[0]).Status)
	})
}
