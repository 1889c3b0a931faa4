package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkIntakeWAL is the WAL a webhook's insert writes on a store that
// already holds RELAY_BENCH_DELIVERIES deliveries (default 0): filled as
// fillIncident fills one but with UUIDs for event ids, with bodies and
// trails. Measured from a checkpoint, as the scale scenario measures
// intake: 20,000 GitHub webhooks (3,329-byte bodies, random event ids) in
// batches of 32, as the intake's group commit stores them under load, with
// each setting of wal_compression in turn, twice (set on the server for the
// run, then reset). Each run logs its range's LSNs, for pg_waldump
// --stats=record. Run it with -benchtime 1x: each run is its 20,000 inserts
// whatever b.N.
//
//	RELAY_BENCH_DELIVERIES=5000000 go test -run '^$' -bench IntakeWAL -benchtime 1x -timeout 1h ./cloud/store/postgres/
func BenchmarkIntakeWAL(b *testing.B) {
	ctx := context.Background()
	n := storetest.BenchDeliveries(0)
	s, conn, _ := openWithConn(ctx, b)
	hosts := 1
	if n > 0 {
		t0 := time.Now()
		fillIncidentOf(ctx, b, conn, n, `md5(i::text)::uuid::text`)
		fillTrails(ctx, b, conn)
		_, err := conn.Exec(ctx, `VACUUM (ANALYZE) deliveries`)
		require.NoError(b, err)
		b.Logf("filled %d deliveries in %s", n, time.Since(t0).Round(time.Millisecond))
		hosts = 50
	} else {
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: "h0", Name: "h0", Now: time.Now()})
		require.NoError(b, err)
	}
	for _, compression := range []string{"off", "lz4", "zstd", "off", "lz4", "zstd"} {
		b.Run("wal_compression="+compression, func(b *testing.B) {
			_, err := conn.Exec(ctx, `ALTER SYSTEM SET wal_compression = '`+compression+`'`)
			require.NoError(b, err)
			_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
			require.NoError(b, err)
			b.Cleanup(func() {
				_, _ = conn.Exec(ctx, `ALTER SYSTEM RESET wal_compression`)
				_, _ = conn.Exec(ctx, `SELECT pg_reload_conf()`)
			})
			insertFromCheckpoint(ctx, b, s, conn, hosts)
		})
	}
}

// insertFromCheckpoint checkpoints the server, then stores 20,000 GitHub
// webhooks over hosts h0…h{hosts-1} in batches of 32 and reports the WAL
// and the time they took, each a webhook.
func insertFromCheckpoint(ctx context.Context, b *testing.B, s *postgres.Store, conn *pgx.Conn, hosts int) {
	_, err := conn.Exec(ctx, `CHECKPOINT`)
	require.NoError(b, err)
	var lsn0, lsn1 string
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0))
	const batch, webhooks = 32, 20_000
	b.ResetTimer()
	t0 := time.Now()
	for done := 0; done < webhooks; {
		ps := make([]*store.DeliveryInsertParams, 0, batch)
		now := time.Now()
		for j := 0; j < batch && done < webhooks; j++ {
			ps = append(ps, installation("h"+strconv.Itoa(done%hosts), now))
			done++
		}
		_, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(b, err)
	}
	took := time.Since(t0)
	b.StopTimer()
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn1))
	var bytes int64
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, lsn1, lsn0).Scan(&bytes))
	b.ReportMetric(float64(bytes)/webhooks, "WAL-B/webhook")
	b.ReportMetric(float64(took.Microseconds())/webhooks, "µs/webhook")
	b.Logf("WAL %s .. %s", lsn0, lsn1)
}
