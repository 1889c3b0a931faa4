package storetest

import (
	"bytes"
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/sweep"
)

// BenchPrune is retention's cost: s is filled with b.N deliveries as a
// host's webhooks leave them (a 3 KB body, stored, leased and acked, each
// step audited, 500 a transaction), received over the hour before the
// timer starts, then pruned as the sweep prunes acked deliveries: batches
// of sweep.RetentionBatch until none is left (without the rests between
// them). It reports deliveries pruned per second and the CPU of this
// process per delivery pruned (the engine's own, for SQLite; Postgres's
// server does its share elsewhere).
func BenchPrune(b *testing.B, s store.Store) {
	ctx := context.Background()
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: "h_prune", Name: "prune", Now: start})
	require.NoError(b, err)
	body := bytes.Repeat([]byte("x"), 3000)
	step := time.Hour / time.Duration(b.N+1)
	for done := 0; done < b.N; {
		ps := make([]*store.DeliveryInsertParams, 0, 500)
		for i := 0; i < 500 && done < b.N; i++ {
			ev := "prune-" + strconv.Itoa(done)
			at := start.Add(time.Duration(done) * step)
			p := insertParams("h_prune", ev, at, deliveryOpts{body: body})
			ps = append(ps, p)
			done++
		}
		_, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(b, err)
		now := ps[len(ps)-1].ReceivedAt
		res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h_prune", Via: store.ViaHeartbeat, Max: 500,
			LeaseFor: time.Minute, Now: now})
		require.NoError(b, err)
		ids := make([]string, len(res.Deliveries))
		for i, d := range res.Deliveries {
			ids[i] = d.ID
		}
		n, err := s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: "h_prune", IDs: ids, Now: now})
		require.NoError(b, err)
		require.Equal(b, len(ps), n)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	pruned := 0
	for {
		n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked,
			PruneParams: store.PruneParams{Before: time.Now(), Limit: sweep.RetentionBatch}})
		require.NoError(b, err)
		pruned += n
		if n < sweep.RetentionBatch {
			break
		}
	}
	b.StopTimer()
	require.Equal(b, b.N, pruned)
	b.ReportMetric(float64(pruned)/b.Elapsed().Seconds(), "pruned/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(pruned), "cpu-µs/delivery")
}

// processCPU is the process's CPU time, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
