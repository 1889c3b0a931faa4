package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
)

// BenchmarkDrainFloor is the least work Postgres does for a drained
// delivery with every transition audited, on bare tables (no index but
// each table's bigint key, no dedupe key, no lookup of pending work): its
// lease (a row update and its 3,329-byte body read from a table of
// bodies), then delivered and acked (a row update each), each with its
// audit row, 128 deliveries a transaction, one statement for each step's
// updates and one for its audit rows. The relay's store does more than
// this for each; no store on this Postgres can do less. Reported per
// delivery: the CPU (user and system) of the server's backend serving the
// connection, from /proc (the server must run on this machine), and this
// process's own.
//
//	go test -run '^$' -bench DrainFloor -benchtime 150x -count 3 ./cloud/store/postgres/
func BenchmarkDrainFloor(b *testing.B) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(b))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close(ctx) })
	var backend int
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend))
	if _, err := backendCPU(backend); err != nil {
		b.Skipf("the server's backend is not on this machine: %v", err)
	}
	_, err = conn.Exec(ctx, `
		CREATE TABLE d (id bigint PRIMARY KEY, status text, attempts int, lease_until bigint,
			delivered_at bigint, acked_at bigint, updated_at bigint, body_id bigint);
		CREATE TABLE bodies (id bigint PRIMARY KEY, body bytea);
		CREATE TABLE events (id bigserial PRIMARY KEY, delivery bigint, at bigint, status text)`)
	require.NoError(b, err)
	const batch = 128
	n := b.N * batch
	body := []byte(strings.Repeat("x", 3329))
	for first := 1; first <= n; first += 1000 {
		ids := make([]int64, 0, 1000)
		for id := first; id < first+1000 && id <= n; id++ {
			ids = append(ids, int64(id))
		}
		_, err := conn.Exec(ctx, `INSERT INTO bodies (id, body) SELECT id, $2 FROM unnest($1::bigint[]) AS id`, ids, body)
		require.NoError(b, err)
		_, err = conn.Exec(ctx, `INSERT INTO d (id, status, attempts, updated_at, body_id)
			SELECT id, 'queued', 0, 0, id FROM unnest($1::bigint[]) AS id`, ids)
		require.NoError(b, err)
	}
	for _, table := range []string{"d", "bodies"} {
		_, err = conn.Exec(ctx, `VACUUM ANALYZE `+table)
		require.NoError(b, err)
	}

	steps := []struct {
		name, update string
	}{
		{"lease", `UPDATE d SET status = 'delivering', attempts = attempts + 1, lease_until = $2::bigint + 60000, updated_at = $2
			FROM bodies WHERE d.id = ANY($1) AND bodies.id = d.body_id RETURNING bodies.body`},
		{"delivered", `UPDATE d SET status = 'delivered', delivered_at = $2, updated_at = $2 WHERE id = ANY($1) RETURNING NULL::bytea`},
		{"acked", `UPDATE d SET status = 'acked', acked_at = $2, updated_at = $2 WHERE id = ANY($1) RETURNING NULL::bytea`},
	}
	server := make([]time.Duration, len(steps))
	client := make([]time.Duration, len(steps))
	b.ResetTimer()
	for i := range b.N {
		ids := make([]int64, batch)
		for k := range ids {
			ids[k] = int64(i*batch + k + 1)
		}
		for k, st := range steps {
			s0, err := backendCPU(backend)
			require.NoError(b, err)
			c0 := cpuTime(b)
			now := time.Now().UnixMilli()
			tx, err := conn.Begin(ctx)
			require.NoError(b, err)
			rows, err := tx.Query(ctx, st.update, ids, now)
			require.NoError(b, err)
			got := 0
			for rows.Next() {
				got++
			}
			require.NoError(b, rows.Err())
			require.Equal(b, batch, got, st.name)
			_, err = tx.Exec(ctx, `INSERT INTO events (delivery, at, status) SELECT id, $2, $3 FROM unnest($1::bigint[]) AS id`,
				ids, now, st.name)
			require.NoError(b, err)
			require.NoError(b, tx.Commit(ctx))
			client[k] += cpuTime(b) - c0
			s1, err := backendCPU(backend)
			require.NoError(b, err)
			server[k] += s1 - s0
		}
	}
	b.StopTimer()
	var total, totalClient time.Duration
	for k, st := range steps {
		b.ReportMetric(float64(server[k].Microseconds())/float64(n), st.name+"-postgres-cpu-µs/delivery")
		total += server[k]
		totalClient += client[k]
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n), "postgres-cpu-µs/delivery")
	b.ReportMetric(float64(totalClient.Microseconds())/float64(n), "client-cpu-µs/delivery")
}

// backendCPU is the CPU a server process has used, user and system, from
// /proc/PID/stat (in clock ticks of 10 ms).
func backendCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis: state is the first,
	// utime the 12th and stime the 13th.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// cpuTime is this process's CPU so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
