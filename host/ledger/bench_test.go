package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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

// BenchmarkDeliveryRecordRandomIDs records deliveries as a draining host
// does: 128 workers at once, into a ledger that already holds 100,000,
// with ids as the cloud gives them ({source}:{event id}:{received ms}),
// whose event ids are GitHub's GUIDs, so in no order of their own.
// cpu-µs/record is the process's CPU (user and system) per record.
//
//	go test -run '^$' -bench DeliveryRecordRandomIDs -benchtime 20000x -count 3 ./host/ledger/
func BenchmarkDeliveryRecordRandomIDs(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	const held = 100_000
	ms := t0.UnixMilli()
	id := func(i int) string {
		h := sha256.Sum256([]byte(strconv.Itoa(i)))
		g := hex.EncodeToString(h[:16])
		if os.Getenv("ORDERED") != "" {
			g = fmt.Sprintf("%032d", i)
		}
		return fmt.Sprintf("github:%s-%s-%s-%s-%s:%d", g[:8], g[8:12], g[12:16], g[16:20], g[20:], ms+int64(i)/4)
	}
	// Each row received and processed a little after the one before, four
	// to a millisecond.
	params := func(i int) RecordParams {
		p := benchEntry(id(i))
		p.Entry.ReceivedAt = t0.Add(time.Duration(i) * time.Millisecond / 4)
		p.Entry.ProcessedAt = p.Entry.ReceivedAt.Add(time.Millisecond)
		return p
	}
	fill := make([]RecordParams, 0, 1000)
	for i := 0; i < held; i++ {
		fill = append(fill, params(i))
		if len(fill) == cap(fill) || i == held-1 {
			var wg sync.WaitGroup
			for _, p := range fill {
				wg.Go(func() {
					if _, err := l.DeliveryRecord(ctx, p); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			fill = fill[:0]
			if err := report(l); err != nil {
				b.Fatal(err)
			}
		}
	}
	var next atomic.Int64
	next.Store(held)
	cpu0 := cpuNow(b)
	b.ResetTimer()
	// The outbox is reported, and emptied, as the records come: a host
	// acks on its next heartbeat or socket report.
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if err := report(l); err != nil {
					b.Error(err)
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(held+b.N) {
					return
				}
				if _, err := l.DeliveryRecord(ctx, params(int(i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-reported
	b.StopTimer()
	b.ReportMetric(float64((cpuNow(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// report takes the outbox's entries and deletes them, as a host's report.
func report(l *Ledger) error {
	for {
		ob, err := l.OutboxList(context.Background(), 1024)
		if err != nil {
			return err
		}
		if len(ob) == 0 {
			return nil
		}
		seqs := make([]int64, len(ob))
		for i, e := range ob {
			seqs[i] = e.Seq
		}
		if err := l.OutboxDelete(context.Background(), seqs); err != nil {
			return err
		}
	}
}

// cpuNow is the CPU the process has used, user and system.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
