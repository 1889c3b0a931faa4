package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// BenchmarkDrainCycle is what the store does for each batch of a host
// draining its backlog over the socket, with a lease window of deliveries
// in flight as a host keeps (128 workers, 8 webhooks each): lease 128
// deliveries, mark them delivered, then apply the host's report of the
// oldest 128 in flight (acks and results), each in its own transaction.
// cpu-µs/delivery is the process's CPU (user + system) per delivery, which
// a loaded machine leaves steadier than wall time, then the same for each
// step.
//
//	go test -run '^$' -bench DrainCycle -benchtime 100x -count 3 ./cloud/store/sqlite/
func BenchmarkDrainCycle(b *testing.B) {
	const batch, window = 128, 1024
	s := benchBacklog(b, b.N*batch+window)
	ctx := context.Background()
	status := 200
	var inFlight []string
	take := func(now time.Time) []string {
		res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h-busy", Max: batch, MaxBytes: 4 << 20, LeaseFor: time.Minute, Now: now})
		require.NoError(b, err)
		require.Len(b, res.Deliveries, batch)
		ids := make([]string, 0, batch)
		for _, d := range res.Deliveries {
			ids = append(ids, d.ID)
		}
		return ids
	}
	mark := func(ids []string, now time.Time) {
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: "h-busy", IDs: ids, Now: now})
		require.NoError(b, err)
		require.Equal(b, batch, n)
		inFlight = append(inFlight, ids...)
	}
	for len(inFlight) < window {
		now := time.Now()
		mark(take(now), now)
	}
	var leasing, marking, reporting time.Duration
	b.ResetTimer()
	for range b.N {
		now := time.Now()
		t0 := cpuTime()
		ids := take(now)
		t1 := cpuTime()
		mark(ids, now)
		t2 := cpuTime()
		done := inFlight[:batch]
		inFlight = inFlight[batch:]
		results := make([]store.DeliveryResult, 0, batch)
		for _, id := range done {
			results = append(results, store.DeliveryResult{DeliveryID: id, Attempt: 1, Result: "success",
				Handler: "forward http://127.0.0.1:3000/hook", ResponseStatus: &status, DurationMS: 3, ReportedAt: now})
		}
		rep, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: "h-busy",
			Ack: &store.DeliveryAckParams{HostID: "h-busy", IDs: done, Now: now}, Results: results})
		t3 := cpuTime()
		require.NoError(b, err)
		require.Equal(b, batch, rep.Acked)
		leasing, marking, reporting = leasing+t1-t0, marking+t2-t1, reporting+t3-t2
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*batch) }
	b.ReportMetric(per(leasing+marking+reporting), "cpu-µs/delivery")
	b.ReportMetric(per(leasing), "lease-cpu-µs/delivery")
	b.ReportMetric(per(marking), "mark-cpu-µs/delivery")
	b.ReportMetric(per(reporting), "report-cpu-µs/delivery")
}
