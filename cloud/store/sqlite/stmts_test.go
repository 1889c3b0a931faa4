package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/flow"
)

func openForStmts(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.write.Exec(`CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)`)
	require.NoError(t, err)
	return s
}

// has reports whether the writer keeps a prepared statement for query.
func (c *stmtCache) has(query string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept[query] != nil
}

// A statement's text runs as it is the first time, is prepared once the
// transaction is over, and is the prepared statement from then on.
func TestKeptStatementsPreparedAfterTheirFirstTransaction(t *testing.T) {
	ctx := context.Background()
	s := openForStmts(t)
	const insert = `INSERT INTO kv (k, v) VALUES (?, ?)`
	require.NoError(t, s.inTx(ctx, func(tx *txn) error {
		st, _ := tx.stmts.take(ctx, tx.Tx, insert)
		require.Nil(t, st, "not prepared before it ran")
		_, err := tx.ExecContext(ctx, insert, 1, "one")
		return err
	}))
	require.True(t, s.stmts.has(insert))
	require.NoError(t, s.inTx(ctx, func(tx *txn) error {
		for k := 2; k <= 3; k++ {
			if _, err := tx.ExecContext(ctx, insert, k, fmt.Sprint(k)); err != nil {
				return err
			}
		}
		st, release := tx.stmts.take(ctx, tx.Tx, insert)
		require.NotNil(t, st, "kept, and given back by each use")
		release()
		release() // twice is once
		return nil
	}))
	var n int
	require.NoError(t, s.read.QueryRow(`SELECT count(*) FROM kv`).Scan(&n))
	require.Equal(t, 3, n)

	// A kept statement that fails leaves the transaction's error as it is
	// and is usable after.
	err := s.inTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, insert, 1, "again")
		return err
	})
	require.ErrorContains(t, err, "UNIQUE")
	require.NoError(t, s.inTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, insert, 4, "four")
		return err
	}))
	require.NoError(t, s.read.QueryRow(`SELECT count(*) FROM kv`).Scan(&n))
	require.Equal(t, 4, n)
}

func scanV(r flow.Scanner) (string, error) {
	var k int
	var v string
	return v, r.Scan(&k, &v)
}

// A query of a text whose kept statement's rows are still open runs
// unprepared: both read what they should.
func TestKeptStatementNotTakenWhileItsRowsAreOpen(t *testing.T) {
	ctx := context.Background()
	s := openForStmts(t)
	const sel = `SELECT k, v FROM kv WHERE k >= $1 ORDER BY k`
	fill := func(tx *txn) error {
		for k := 1; k <= 3; k++ {
			if _, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, k, fmt.Sprint("v", k)); err != nil {
				return err
			}
		}
		_, err := flow.All(ctx, executor{tx}, scanV, sel, 1)
		return err
	}
	require.NoError(t, s.inTx(ctx, fill))
	require.True(t, s.stmts.has(numbered(sel)))

	require.NoError(t, s.inTx(ctx, func(tx *txn) error {
		outer, err := executor{tx}.Query(ctx, sel, 2)
		require.NoError(t, err)
		var got []string
		for outer.Next() {
			var k int
			var v string
			require.NoError(t, outer.Scan(&k, &v))
			// The same text again, its kept statement busy with outer.
			inner, err := flow.All(ctx, executor{tx}, scanV, sel, k)
			require.NoError(t, err)
			got = append(got, fmt.Sprint(v, inner))
		}
		require.NoError(t, outer.Err())
		outer.Close()
		require.Equal(t, []string{"v2[v2 v3]", "v3[v3]"}, got)
		st, release := tx.stmts.take(ctx, tx.Tx, numbered(sel))
		require.NotNil(t, st, "given back when outer closed")
		release()
		return nil
	}))
}

// At most maxKept texts are kept; the rest run as they are, as do
// scripts of several statements and texts that do not prepare.
func TestKeptStatementsBounded(t *testing.T) {
	ctx := context.Background()
	s := openForStmts(t)
	for i := 0; i < maxKept+10; i++ {
		require.NoError(t, s.inTx(ctx, func(tx *txn) error {
			_, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO kv (k, v) VALUES (%d, 'x')`, i))
			return err
		}))
	}
	const script = `INSERT INTO kv (k, v) VALUES (-1, 'a'); INSERT INTO kv (k, v) VALUES (-2, 'b')`
	require.NoError(t, s.inTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, script)
		return err
	}))
	s.stmts.mu.Lock()
	kept, wanted := len(s.stmts.kept), len(s.stmts.wanted)
	_, scriptKept := s.stmts.kept[script]
	s.stmts.mu.Unlock()
	require.Equal(t, maxKept, kept)
	require.Zero(t, wanted)
	require.False(t, scriptKept)
	var n int
	require.NoError(t, s.read.QueryRow(`SELECT count(*) FROM kv`).Scan(&n))
	require.Equal(t, maxKept+12, n)

	// Closing the store closes what it kept, and keeps nothing more.
	require.NoError(t, s.Close())
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	require.Empty(t, s.stmts.kept)
}

// A text that does not prepare is not tried again.
func TestKeptStatementThatFailsToPrepare(t *testing.T) {
	ctx := context.Background()
	s := openForStmts(t)
	const bad = `INSERT INTO nowhere (k) VALUES (?)`
	for range 2 {
		err := s.inTx(ctx, func(tx *txn) error {
			_, err := tx.ExecContext(ctx, bad, 1)
			return err
		})
		require.ErrorContains(t, err, "no such table")
		// The failed transaction left the text wanted; the next one
		// prepares it, which fails, and it is then never taken.
		require.NoError(t, s.inTx(ctx, func(*txn) error { return nil }))
	}
	s.stmts.mu.Lock()
	k, tried := s.stmts.kept[bad]
	s.stmts.mu.Unlock()
	require.True(t, tried)
	require.Nil(t, k)
}
