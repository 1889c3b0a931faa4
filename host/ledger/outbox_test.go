package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOutboxHeldMatchesTheTable: the outbox a writable ledger lists from
// memory is the one its table holds, entry for entry (sequence numbers, the
// run each reports), after records, re-records, acks queued again, hand-backs,
// deletions and a transaction that failed, made concurrently so that they
// share transactions; and after opening the ledger again.
func TestOutboxHeldMatchesTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := setup(t)
	refuseBad(t, l)
	table, err := OpenReadOnly(ctx, path)
	require.NoError(t, err)
	defer table.Close()

	same := func(l *Ledger) {
		t.Helper()
		held, err := l.OutboxList(ctx, 1<<20)
		require.NoError(t, err)
		stored, err := table.OutboxList(ctx, 1<<20)
		require.NoError(t, err)
		require.Equal(t, stored, held)
		requireCount(t, len(stored), l.OutboxCount)
		first, err := l.OutboxList(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, stored[:min(3, len(stored))], first)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		listed, err := l.OutboxList(ctx, 1<<20)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, 16) // of the writes that must succeed
		for w := range 16 {
			id := fmt.Sprintf("d%d", rng.IntN(40))
			switch k := rng.IntN(10); {
			case k < 5:
				e := entry(id, []Result{ResultSuccess, ResultError, ResultSkipped}[rng.IntN(3)], t0)
				e.CloudAttempt, e.ResponseStatus = round, ptr(200+w)
				wg.Go(func() {
					_, err := l.DeliveryRecord(ctx, RecordParams{Entry: e, Retryable: true})
					errs <- err
				})
			case k < 7:
				wg.Go(func() { errs <- l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: id, Kind: OutboxAck, CreatedAt: t0}) })
			case k < 8:
				wg.Go(func() {
					errs <- l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "never-" + id, Kind: OutboxNack, NotStarted: true,
						Retryable: true, Error: "host stopping: not started", CreatedAt: t0})
				})
			case k < 9:
				wg.Go(func() {
					_, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry("bad-"+id, ResultSuccess, t0)})
					if err == nil {
						errs <- fmt.Errorf("bad-%s recorded", id)
					}
				})
			default:
				var seqs []int64
				for _, ob := range listed {
					if rng.IntN(2) == 0 {
						seqs = append(seqs, ob.Seq)
					}
				}
				wg.Go(func() { errs <- l.OutboxDelete(ctx, seqs) })
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		same(l)
	}
	require.NoError(t, l.Close())

	l = reopen(t, path)
	same(l)
	// Taken out of memory as out of the table.
	listed, err := l.OutboxList(ctx, 1<<20)
	require.NoError(t, err)
	require.NotEmpty(t, listed)
	require.NoError(t, l.OutboxDelete(ctx, []int64{listed[0].Seq}))
	same(l)
}

// TestPruneKeepsRowsWithPendingOutcomes: retention does not prune a row
// whose outcome still waits to be reported, so the report carries its run
// (across a restart too) and the row still says the delivery is done; once
// the cloud has the outcome, the row goes.
func TestPruneKeepsRowsWithPendingOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := setup(t)
	e := entry("github:a:1", ResultSuccess, t0)
	e.ResponseStatus = ptr(204)
	record(t, l, e)
	record(t, l, entry("github:b:1", ResultSuccess, t0))
	ob := outbox(t, l)
	require.Len(t, ob, 2)
	require.NoError(t, l.OutboxDelete(ctx, []int64{ob[1].Seq}), "b's ack reached the cloud")

	n, err := l.DeliveryPrune(ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only b, whose outcome the cloud has")
	_, err = l.DeliveryGet(ctx, "github:b:1")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = l.DeliveryGet(ctx, "github:a:1")
	require.NoError(t, err, "a's ack is still to go")

	require.NoError(t, l.Close())
	l = reopen(t, path)
	ob = outbox(t, l)
	require.Len(t, ob, 1)
	require.Equal(t, &RunResult{Result: ResultSuccess, Handler: e.Handler, ResponseStatus: ptr(204), DurationMS: 12}, ob[0].Ran,
		"reported with its run after a restart")

	require.NoError(t, l.OutboxDelete(ctx, []int64{ob[0].Seq}))
	n, err = l.DeliveryPrune(ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "its outcome delivered, a goes too")
}
