package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// benchEntry is a typical forwarded GitHub webhook's row.
func benchEntry(id string) RecordParams {
	e := entry(id, ResultSuccess, t0)
	e.ReceivedAt = t0
	e.CloudAttempt = 1
	e.ResponseStatus = ptr(200)
	e.Output = "ok"
	e.Fields = map[string]string{"github.repo": "acme/app", "github.number": "7", "github.action": "opened"}
	return RecordParams{Entry: e}
}

func benchLedger(b *testing.B) *Ledger {
	b.Helper()
	l, err := Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkDeliveryRecord records b.N deliveries one after the other, then
// from N concurrent callers (as the agent's workers do): each call returns
// once its row and outbox entry are durable.
func BenchmarkDeliveryRecord(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		l := benchLedger(b)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:seq-%d:1", i))); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := benchLedger(b)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:par-%d:1", i))); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkDeliveryGet looks up deliveries one by one, as the agent does
// before running a handler.
func BenchmarkDeliveryGet(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	const rows = 1000
	for i := range rows {
		if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:get-%d:1", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// Half are found, half are not (the common case of a new delivery).
		if _, err := l.DeliveryGet(ctx, fmt.Sprintf("github:get-%d:1", i%(2*rows))); err != nil && err != ErrNotFound {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeliveriesDone looks up one leased webhook at a time, as the
// agent does for each pushed webhook before running its handler: most are
// new, so most lookups find nothing.
func BenchmarkDeliveriesDone(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	const rows = 1000
	for i := range rows {
		if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:done-%d:1", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := l.DeliveriesDone(ctx, []string{fmt.Sprintf("github:done-%d:1", rows+i)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeliveriesDoneAfterRecord is BenchmarkDeliveriesDone as a
// webhook at a time meets it: each look-up follows the record of the one
// before, so the reading connection finds the database changed. Only the
// look-ups are timed.
func BenchmarkDeliveriesDoneAfterRecord(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	const rows = 1000
	for i := range rows {
		if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:after-%d:1", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if _, err := l.DeliveryRecord(ctx, benchEntry(fmt.Sprintf("github:after-%d:1", rows+i))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := l.DeliveriesDone(ctx, []string{fmt.Sprintf("github:after-%d:1", rows+i+1)}); err != nil {
			b.Fatal(err)
		}
	}
}
