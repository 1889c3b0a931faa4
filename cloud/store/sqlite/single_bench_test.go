package sqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// BenchmarkInsertOne is the intake's commit as a webhook at a low rate
// meets it: one 11 KB GitHub webhook at a time, a pause between them, alone
// and through the group commit the cloud puts in front of the store. It
// reports the latency of each insert (p50, p99) and the CPU per insert,
// split into the process's own and the kernel's (the write-ahead log's
// writes and its fdatasync): what the end-to-end latency at 100/s pays
// for the store.
//
//	go test -run '^$' -bench InsertOne -benchtime 1000x ./cloud/store/sqlite/
func BenchmarkInsertOne(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		b.Run("grouped="+strconv.FormatBool(grouped), func(b *testing.B) {
			ctx := context.Background()
			raw, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "cloud.db"))
			require.NoError(b, err)
			require.NoError(b, raw.Migrate(ctx))
			var s store.Store = raw
			if grouped {
				s = store.GroupCommit(raw, store.GroupOptions{})
			}
			b.Cleanup(func() { s.Close() })
			_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-bench", Name: "bench", Now: time.Now()})
			require.NoError(b, err)
			body := make([]byte, 11000)
			for i := range body {
				body[i] = 'a' + byte(i%26)
			}
			lat := make([]time.Duration, 0, b.N)
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			for range b.N {
				time.Sleep(2 * time.Millisecond) // idle between webhooks, as at a low rate
				now := time.Now()
				ev := uuid()
				p := &store.DeliveryInsertParams{ID: "github:" + ev + ":" + strconv.FormatInt(now.UnixMilli(), 10),
					HostID: "h-bench", Source: "github", EventID: ev, EventType: "installation", EventAction: "created",
					RawBody: body, ReceivedAt: now, MaxAttempts: 10,
					Headers: map[string]string{"x-github-event": "installation", "x-github-delivery": ev}}
				start := time.Now()
				_, err := s.DeliveryInsert(ctx, p)
				lat = append(lat, time.Since(start))
				require.NoError(b, err)
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(ru1.Utime.Nano()-ru0.Utime.Nano())/1e3/float64(b.N), "user-µs/op")
			b.ReportMetric(float64(ru1.Stime.Nano()-ru0.Stime.Nano())/1e3/float64(b.N), "sys-µs/op")
		})
	}
}
