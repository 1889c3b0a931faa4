package sqlite_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// BenchmarkInsertBatch is the intake's transaction alone: batches of 128
// GitHub webhooks (3,329-byte bodies) into one SQLite file, each id a
// counter (prefix-1, prefix-2, …) or random (a UUID, as GitHub's are). It
// reports, per webhook, the bytes the process wrote to disk (WAL and
// checkpoints, /proc/self/io) and the CPU it took, which depend less on the
// machine's load than the rate does.
//
// With random ids, the dedupe key (host, source, event id) is the one index
// written at random places: bodies, the audit trail and the rows' own key
// are led by arrival order (migrations 7, 12 and 16).
//
//	go test -run '^$' -bench InsertBatch -benchtime 100000x ./cloud/store/sqlite/
func BenchmarkInsertBatch(b *testing.B) {
	for _, ids := range []string{"counter", "random"} {
		b.Run(ids, func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "cloud.db"))
			require.NoError(b, err)
			b.Cleanup(func() { s.Close() })
			require.NoError(b, s.Migrate(ctx))
			_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-bench", Name: "bench", Now: time.Now()})
			require.NoError(b, err)
			body := make([]byte, 3329)
			for i := range body {
				body[i] = 'a' + byte(i%26)
			}
			id := func(i int) string { return "bench-" + strconv.Itoa(i) }
			if ids != "counter" {
				id = func(int) string { return uuid() }
			}
			const batch = 128
			w0, cpu0 := writeBytes(b), cpuTime()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for done := 0; done < b.N; {
				ps := make([]*store.DeliveryInsertParams, 0, batch)
				now := time.Now()
				for j := 0; j < batch && done < b.N; j++ {
					ev := id(done)
					did := "github:" + ev + ":" + strconv.FormatInt(now.UnixMilli(), 10)
					ps = append(ps, &store.DeliveryInsertParams{ID: did,
						HostID: "h-bench", Source: "github", EventID: ev, EventType: "installation", EventAction: "created",
						RawBody: body, ReceivedAt: now, MaxAttempts: 10,
						Headers: map[string]string{"x-github-event": "installation", "x-github-delivery": ev,
							"content-type": "application/json", "user-agent": "GitHub-Hookshot/a1b2c3d"}})
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

func uuid() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
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
