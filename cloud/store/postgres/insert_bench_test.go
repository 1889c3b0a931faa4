package postgres_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/shared/sharedtest"
)

// BenchmarkInsertCosts is what the correlation id's index and the kept
// counts (migration 20) cost intake on Postgres: batches of 128 GitHub
// webhooks (3,329-byte bodies, random event ids and correlation ids) into
// a new database with neither ("bare"), with the index alone ("index"),
// and as migrated ("all"), then drained (leased, marked delivered and
// acked, 128 at a time). It reports, per webhook, the CPU of the server
// process serving the store's one connection for each (from /proc: the
// server must run on this machine) and the bytes of the index.
//
//	go test -run '^$' -bench InsertCosts -benchtime 20000x -count 3 ./cloud/store/postgres/
func BenchmarkInsertCosts(b *testing.B) {
	for _, variant := range []string{"bare", "index", "all"} {
		b.Run(variant, func(b *testing.B) {
			ctx := context.Background()
			url := pgtest.NewDatabase(b)
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			s, err := postgres.Open(ctx, url+sep+"pool_max_conns=1")
			require.NoError(b, err)
			b.Cleanup(func() { s.Close() })
			conn, err := pgx.Connect(ctx, url)
			require.NoError(b, err)
			b.Cleanup(func() { conn.Close(ctx) })
			backend, err := postgres.BackendPID(ctx, s)
			require.NoError(b, err)
			if _, err := backendCPU(backend); err != nil {
				b.Skipf("the server's backend is not on this machine: %v", err)
			}
			if variant != "all" {
				_, err = conn.Exec(ctx, `DROP TRIGGER delivery_counts_inserted ON deliveries;
					DROP TRIGGER delivery_counts_updated ON deliveries; DROP TRIGGER delivery_counts_deleted ON deliveries`)
				require.NoError(b, err)
			}
			if variant == "bare" {
				_, err = conn.Exec(ctx, `DROP INDEX deliveries_correlation_idx`)
				require.NoError(b, err)
			}
			_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-bench", Name: "bench", Now: time.Now()})
			require.NoError(b, err)
			const batch = 128
			cpu0, err := backendCPU(backend)
			require.NoError(b, err)
			b.ResetTimer()
			for done := 0; done < b.N; {
				ps := make([]*store.DeliveryInsertParams, 0, batch)
				now := time.Now()
				for j := 0; j < batch && done < b.N; j++ {
					ps = append(ps, installation("h-bench", now))
					done++
				}
				_, err := s.DeliveryInsertBatch(ctx, ps)
				require.NoError(b, err)
			}
			b.StopTimer()
			cpu1, err := backendCPU(backend)
			require.NoError(b, err)
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "postgres-cpu-µs/webhook")
			// The drain that follows: leased 128 at a time, marked
			// delivered and acked, each a statement the counts' trigger
			// of updates sees.
			for {
				now := time.Now()
				leased, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h-bench", Max: batch, MaxBytes: 1 << 30,
					LeaseFor: time.Minute, Now: now})
				require.NoError(b, err)
				if len(leased.Deliveries) == 0 {
					break
				}
				ids := make([]string, len(leased.Deliveries))
				for i, d := range leased.Deliveries {
					ids[i] = d.ID
				}
				_, err = s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: "h-bench", IDs: ids, Now: now})
				require.NoError(b, err)
				n, err := s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: "h-bench", IDs: ids, Now: now})
				require.NoError(b, err)
				require.Equal(b, len(ids), n)
			}
			cpu2, err := backendCPU(backend)
			require.NoError(b, err)
			b.ReportMetric(float64((cpu2-cpu1).Microseconds())/float64(b.N), "drain-postgres-cpu-µs/webhook")
			var index int64
			if variant != "bare" {
				require.NoError(b, conn.QueryRow(ctx, `SELECT pg_relation_size('deliveries_correlation_idx')`).Scan(&index))
			}
			b.ReportMetric(float64(index)/float64(b.N), "index-B/webhook")
		})
	}
}

// BenchmarkInsertBody is one webhook's insert, as the intake stores a lone
// webhook, by the size of its body: a 3 KB GitHub webhook and a 300 KB push
// (a JSON document that compresses as a push of many commits does). The
// body goes into its table once, from its parameter: carried through the
// statement's other parts, a 300 KB body was copied into each of them.
//
//	go test -run '^$' -bench InsertBody -benchtime 200x ./cloud/store/postgres/
func BenchmarkInsertBody(b *testing.B) {
	for _, size := range []int{3 << 10, 300 << 10} {
		b.Run(strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
			ctx := context.Background()
			s, err := postgres.Open(ctx, pgtest.NewDatabase(b))
			require.NoError(b, err)
			b.Cleanup(func() { s.Close() })
			backend, err := postgres.BackendPID(ctx, s)
			require.NoError(b, err)
			_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-bench", Name: "bench", Now: time.Now()})
			require.NoError(b, err)
			body := pushOf(size)
			insert := func() {
				now := time.Now()
				ev := sharedtest.DeliveryUUID()
				_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: "github:" + ev + ":" + strconv.FormatInt(now.UnixMilli(), 10),
					HostID: "h-bench", Source: "github", EventID: ev, EventType: "push", RawBody: body, ReceivedAt: now,
					MaxAttempts: 10, Headers: map[string]string{"x-github-event": "push", "x-github-delivery": ev}})
				require.NoError(b, err)
			}
			for range 50 { // the connections' and the tables' first use
				insert()
			}
			cpu0, cpuErr := backendCPU(backend)
			b.ResetTimer()
			for range b.N {
				insert()
			}
			b.StopTimer()
			if cpu1, err := backendCPU(backend); err == nil && cpuErr == nil {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "postgres-cpu-µs/webhook")
			}
		})
	}
}

// pushOf is a GitHub push of about size bytes: commits of their own ids,
// messages and files, as a push lists them.
func pushOf(size int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"ref":"refs/heads/main","commits":[`)
	for i := 0; sb.Len() < size; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		id := sharedtest.DeliveryUUID()
		sb.WriteString(`{"id":"` + id + `","message":"change ` + strconv.Itoa(i) + ` of the build","timestamp":"2026-11-30T07:00:00Z",` +
			`"author":{"name":"A Developer","email":"dev@example.com"},"modified":["cmd/tool/main.go","internal/pkg/` +
			strconv.Itoa(i) + `.go","README.md"]}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// installationBody is installation's: 3,329 bytes, as a GitHub
// installation webhook's.
var installationBody = func() []byte {
	body := make([]byte, 3329)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	return body
}()

// installation is a GitHub installation webhook to hostID's github source
// with a random event id and correlation id, received at now.
func installation(hostID string, now time.Time) *store.DeliveryInsertParams {
	ev := sharedtest.DeliveryUUID()
	return &store.DeliveryInsertParams{ID: "github:" + ev + ":" + strconv.FormatInt(now.UnixMilli(), 10),
		CorrelationID: intake.NewCorrelationID(now), HostID: hostID, Source: "github", EventID: ev,
		EventType: "installation", EventAction: "created", RawBody: installationBody, ReceivedAt: now, MaxAttempts: 10,
		Headers: map[string]string{"x-github-event": "installation", "x-github-delivery": ev,
			"content-type": "application/json", "user-agent": "GitHub-Hookshot/a1b2c3d"}}
}
