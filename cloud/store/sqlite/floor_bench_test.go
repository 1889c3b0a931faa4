package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkDrainFloor is the least SQLite work a drained delivery takes
// with every transition audited, on bare tables (no index but the rowid,
// no dedupe key, no lookup of pending work): its lease (a row update and
// its 3,329-byte body read from a table of bodies), then delivered and
// acked (a row update each), each with its audit row, 128 deliveries a
// transaction, statements prepared; and a host's ledger record of it (one
// row keyed by its id, in arrival order). WAL, synchronous=FULL, as the store and the ledger
// run. The relay's own store does more than this for each (BenchmarkDrainCycle);
// no store of this engine can do less on this machine. Each step's CPU
// (user and system) per delivery is reported.
//
//	go test -run '^$' -bench DrainFloor -benchtime 150x -count 3 ./cloud/store/sqlite/
func BenchmarkDrainFloor(b *testing.B) {
	ctx := context.Background()
	const batch = 128
	open := func(name string) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), name)+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
		require.NoError(b, err)
		db.SetMaxOpenConns(1)
		b.Cleanup(func() { db.Close() })
		return db
	}
	db, ledger := open("cloud.db"), open("ledger.db")
	_, err := db.ExecContext(ctx, `
		CREATE TABLE d (id INTEGER PRIMARY KEY, status TEXT, attempts INTEGER, lease_until INTEGER,
			delivered_at INTEGER, acked_at INTEGER, updated_at INTEGER, body_id INTEGER);
		CREATE TABLE bodies (id INTEGER PRIMARY KEY, body BLOB);
		CREATE TABLE events (id INTEGER PRIMARY KEY, delivery INTEGER, at INTEGER, status TEXT)`)
	require.NoError(b, err)
	_, err = ledger.ExecContext(ctx, `CREATE TABLE ledger (delivery_id TEXT PRIMARY KEY, result TEXT, at INTEGER)`)
	require.NoError(b, err)
	n := b.N * batch
	body := []byte(strings.Repeat("x", 3329))
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(b, err)
	for i := 1; i <= n; i++ {
		_, err := tx.ExecContext(ctx, `INSERT INTO bodies (id, body) VALUES (?, ?)`, i, body)
		require.NoError(b, err)
		_, err = tx.ExecContext(ctx, `INSERT INTO d (id, status, attempts, updated_at, body_id) VALUES (?, 'queued', 0, 0, ?)`, i, i)
		require.NoError(b, err)
	}
	require.NoError(b, tx.Commit())
	prepare := func(db *sql.DB, q string) *sql.Stmt {
		st, err := db.PrepareContext(ctx, q)
		require.NoError(b, err)
		b.Cleanup(func() { st.Close() })
		return st
	}
	var (
		lease = prepare(db, `UPDATE d SET status = 'delivering', attempts = attempts + 1, lease_until = ?1 + 60000, updated_at = ?1
			WHERE id = ?2 RETURNING (SELECT body FROM bodies WHERE bodies.id = d.body_id)`)
		delivered = prepare(db, `UPDATE d SET status = 'delivered', delivered_at = ?1, updated_at = ?1 WHERE id = ?2`)
		acked     = prepare(db, `UPDATE d SET status = 'acked', acked_at = ?1, updated_at = ?1 WHERE id = ?2`)
		event     = prepare(db, `INSERT INTO events (delivery, at, status) VALUES (?, ?, ?)`)
		record    = prepare(ledger, `INSERT INTO ledger (delivery_id, result, at) VALUES (?, 'success', ?)`)
	)
	var spent [4]time.Duration
	step := func(k int, db *sql.DB, first int, fn func(tx *sql.Tx, id int) error) {
		c0 := cpuTime()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for id := first; id < first+batch; id++ {
			require.NoError(b, fn(tx, id))
		}
		require.NoError(b, tx.Commit())
		spent[k] += cpuTime() - c0
	}
	transition := func(st *sql.Stmt, status string) func(tx *sql.Tx, id int) error {
		return func(tx *sql.Tx, id int) error {
			now := time.Now().UnixMilli()
			if _, err := tx.Stmt(st).ExecContext(ctx, now, id); err != nil {
				return err
			}
			_, err := tx.Stmt(event).ExecContext(ctx, id, now, status)
			return err
		}
	}
	b.ResetTimer()
	for i := range b.N {
		first := i*batch + 1
		step(0, db, first, func(tx *sql.Tx, id int) error {
			now := time.Now().UnixMilli()
			var got []byte
			if err := tx.Stmt(lease).QueryRowContext(ctx, now, id).Scan(&got); err != nil {
				return err
			}
			if len(got) != len(body) {
				return fmt.Errorf("body of %d: %d bytes", id, len(got))
			}
			_, err := tx.Stmt(event).ExecContext(ctx, id, now, "delivering")
			return err
		})
		step(1, db, first, transition(delivered, "delivered"))
		step(2, db, first, transition(acked, "acked"))
		step(3, ledger, first, func(tx *sql.Tx, id int) error {
			// Keyed in arrival order, as the ledger is.
			_, err := tx.Stmt(record).ExecContext(ctx, fmt.Sprintf("%d:github:3f2c9a4e-7d5e-4c3b-9b1a-5e6f7a8b9c0d", 1764230400000+id), time.Now().UnixMilli())
			return err
		})
	}
	b.StopTimer()
	var total time.Duration
	for k, name := range []string{"lease", "delivered", "acked", "ledger"} {
		b.ReportMetric(float64(spent[k].Microseconds())/float64(n), name+"-cpu-µs/delivery")
		total += spent[k]
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n), "cpu-µs/delivery")
}
