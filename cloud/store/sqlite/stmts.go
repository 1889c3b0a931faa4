package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"sync"
)

// txn is a writer transaction whose statements are kept prepared
// (stmtCache): SQLite parses a statement's text each time it runs one
// that was not, which in a drain was 6.6 % of the cloud's CPU. Its
// ExecContext, prepared, queryKept and queryRowKept keep them; the
// QueryContext and QueryRowContext of the *sql.Tx within parse each time
// (their rows' end cannot be seen), for the reads no hot path makes.
type txn struct {
	*sql.Tx
	stmts *stmtCache
}

// ExecContext runs query with the writer's prepared statement for its
// text, when there is one.
func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, release := t.stmts.take(ctx, t.Tx, query)
	if st == nil {
		return t.Tx.ExecContext(ctx, query, args...)
	}
	defer release()
	return st.ExecContext(ctx, args...)
}

// prepared is the transaction's statement for query, to run more than
// once: the kept one when it is free, else one prepared for the
// transaction alone. done gives it back.
func (t *txn) prepared(ctx context.Context, query string) (st *sql.Stmt, done func(), err error) {
	if st, release := t.stmts.take(ctx, t.Tx, query); st != nil {
		return st, release, nil
	}
	if st, err = t.Tx.PrepareContext(ctx, query); err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close() }, nil
}

// queryKept is QueryContext with the writer's prepared statement for its
// text, when there is one and no rows of it are open; done, which the
// caller must call once it has closed the rows, gives the statement back.
// (QueryContext itself prepares each time: its rows' end cannot be seen.)
func (t *txn) queryKept(ctx context.Context, query string, args ...any) (rows *sql.Rows, done func(), err error) {
	st, release := t.stmts.take(ctx, t.Tx, query)
	if st == nil {
		rows, err = t.Tx.QueryContext(ctx, query, args...)
		return rows, func() {}, err
	}
	rows, err = st.QueryContext(ctx, args...)
	if err != nil {
		release()
		return nil, nil, err
	}
	return rows, release, nil
}

// queryRowKept is QueryRowContext with a kept statement (queryKept): the
// row it returns is read, and the statement given back, by its Scan,
// which says sql.ErrNoRows for none as sql.Row's does.
func (t *txn) queryRowKept(ctx context.Context, query string, args ...any) scanner {
	rows, done, err := t.queryKept(ctx, query, args...)
	return &keptRow{rows, done, err}
}

type keptRow struct {
	rows *sql.Rows
	done func()
	err  error
}

func (r *keptRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.done()
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// maxKept bounds the statements kept: a text built for a number of
// values (an IN list) is one statement for each number, and past the
// bound a text is parsed each time, as before.
const maxKept = 128

// stmtCache is the writer's statements, each prepared once on the
// writer's one connection and used by every transaction (Tx.StmtContext
// finds it prepared there). A text met for the first time runs as it is
// and is prepared once the transaction is over: preparing on the database
// while a transaction holds its one connection would wait for itself.
type stmtCache struct {
	mu     sync.Mutex
	kept   map[string]*keptStmt // nil: preparing it failed, not tried again
	wanted map[string]bool
	closed bool
}

type keptStmt struct {
	stmt *sql.Stmt
	// busy: one use of it is under way. A statement's rows hold it until
	// they are closed, and a second query of the same text meanwhile would
	// start it over under them; that one runs unprepared instead.
	busy bool
}

func newStmtCache() *stmtCache {
	return &stmtCache{kept: map[string]*keptStmt{}, wanted: map[string]bool{}}
}

// take returns the transaction's statement for query's text and the
// function that gives it back, or nil when it has none free (the text
// then waits to be prepared, if there is room).
func (c *stmtCache) take(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, func()) {
	c.mu.Lock()
	k, ok := c.kept[query]
	switch {
	case !ok:
		// A script of several statements gains nothing: the driver
		// parses each again whenever it runs.
		if !c.closed && len(c.kept)+len(c.wanted) < maxKept && !strings.Contains(query, ";") {
			c.wanted[query] = true
		}
		c.mu.Unlock()
		return nil, nil
	case k == nil || k.busy:
		c.mu.Unlock()
		return nil, nil
	}
	k.busy = true
	c.mu.Unlock()
	st := tx.StmtContext(ctx, k.stmt)
	var once sync.Once
	return st, func() {
		once.Do(func() {
			_ = st.Close() // the transaction's handle: the prepared statement stays
			c.mu.Lock()
			k.busy = false
			c.mu.Unlock()
		})
	}
}

// prepareWanted prepares, on db, the texts met since it last ran. It runs
// between transactions, when db's one connection is free.
func (c *stmtCache) prepareWanted(ctx context.Context, db *sql.DB) {
	c.mu.Lock()
	if len(c.wanted) == 0 {
		c.mu.Unlock()
		return
	}
	wanted := c.wanted
	c.wanted = map[string]bool{}
	c.mu.Unlock()
	ctx = context.WithoutCancel(ctx) // a caller that gave up does not make a text unpreparable
	for query := range wanted {
		st, err := db.PrepareContext(ctx, query)
		c.mu.Lock()
		_, had := c.kept[query] // prepared meanwhile by another transaction's turn
		switch {
		case c.closed || had:
			if err == nil {
				_ = st.Close()
			}
		case err != nil:
			c.kept[query] = nil
		default:
			c.kept[query] = &keptStmt{stmt: st}
		}
		c.mu.Unlock()
	}
}

// close closes every statement kept; none is kept after.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, k := range c.kept {
		if k != nil {
			_ = k.stmt.Close()
		}
	}
	clear(c.kept)
	clear(c.wanted)
}
