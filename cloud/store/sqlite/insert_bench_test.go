package sqlite_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/shared/sharedtest"
)

// BenchmarkInsertBatch is the intake's transaction alone: batches of 128
// GitHub webhooks (3,329-byte bodies) into one SQLite file, each id a
// counter (prefix-1, prefix-2, …) or random (a UUID, as GitHub's are). It
// reports, per webhook, the bytes the process wrote to disk (WAL and
// checkpoints, /proc/self/io) and the CPU it took, which depend less on the
// machine's load than the rate does.
//
// With random ids, the dedupe key (host, source, event id) is written at
// random places, as is, whatever the ids, the correlation id's index
// (migration 23; each delivery's id is 64 random bits, as intake makes
// them): bodies, the audit trail and the rows' own key are led by arrival
// order (migrations 7, 12 and 16).
//
// fanout=5 is random with each webhook to a group of five hosts whose
// source is fanout: five deliveries sharing one body, per webhook.
//
//	go test -run '^$' -bench InsertBatch -benchtime 100000x ./cloud/store/sqlite/
func BenchmarkInsertBatch(b *testing.B) {
	for _, ids := range []string{"counter", "random", "fanout=5"} {
		b.Run(ids, func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "cloud.db"))
			require.NoError(b, err)
			b.Cleanup(func() { s.Close() })
			require.NoError(b, s.Migrate(ctx))
			_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-bench", Name: "bench", Now: time.Now()})
			require.NoError(b, err)
			var members []string
			if ids == "fanout=5" {
				_, err = s.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_bench", Name: "bench", Now: time.Now()})
				require.NoError(b, err)
				for i := range 5 {
					m := "h-member-" + strconv.Itoa(i)
					_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: m, Name: m, Now: time.Now()})
					require.NoError(b, err)
					_, err = s.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_bench", HostID: m, Now: time.Now()})
					require.NoError(b, err)
					members = append(members, m)
				}
			}
			body := make([]byte, 3329)
			for i := range body {
				body[i] = 'a' + byte(i%26)
			}
			id := func(i int) string { return "bench-" + strconv.Itoa(i) }
			if ids != "counter" {
				id = func(int) string { return sharedtest.DeliveryUUID() }
			}
			const batch = 128
			w0, cpu0 := writeBytes(b), cpuTime()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for done := 0; done < b.N; {
				ps := make([]*store.DeliveryInsertParams, 0, batch*max(1, len(members)))
				now := time.Now()
				for j := 0; j < batch && done < b.N; j++ {
					ev := id(done)
					did := "github:" + ev + ":" + strconv.FormatInt(now.UnixMilli(), 10)
					p := &store.DeliveryInsertParams{ID: did, CorrelationID: intake.NewCorrelationID(now),
						HostID: "h-bench", Source: "github", EventID: ev, EventType: "installation", EventAction: "created",
						RawBody: body, ReceivedAt: now, MaxAttempts: 10,
						Headers: map[string]string{"x-github-event": "installation", "x-github-delivery": ev,
							"content-type": "application/json", "user-agent": "GitHub-Hookshot/a1b2c3d"}}
					if members == nil {
						ps = append(ps, p)
					}
					share := &store.BodyShare{}
					for _, m := range members {
						mp := *p
						mp.HostID, mp.GroupID, mp.Lane, mp.Share = m, "g_bench", m, share
						mp.ID = store.LaneDeliveryID("github", ev, m, now)
						ps = append(ps, &mp)
					}
					done++
				}
				_, err := s.DeliveryInsertBatch(ctx, ps)
				require.NoError(b, err)
			}
			b.StopTimer()
			b.ReportMetric(float64(writeBytes(b)-w0)/float64(b.N), "disk-B/webhook")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/webhook")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "webhooks/s")
		})
	}
}

// writeBytes is the process's write_bytes from /proc/self/io: what it
// caused to be written to storage.
func writeBytes(b *testing.B) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		b.Skip("no /proc/self/io")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no write_bytes in /proc/self/io")
	return 0
}

// cpuTime is the process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
				ev := sharedtest.DeliveryUUID()
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
