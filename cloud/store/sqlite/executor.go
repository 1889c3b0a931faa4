package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store/flow"
)

// db is the Store as the shared flows use it.
func (s *Store) db() flowDB { return flowDB{s} }

// flowDB is the Store as the shared flows (package flow) use it: reads on
// the readers' pool, writes on the writer, transactions as inTx runs them.
type flowDB struct{ s *Store }

var _ flow.DB = flowDB{}

func (d flowDB) Read() flow.Executor  { return executor{d.s.read} }
func (d flowDB) Write() flow.Executor { return executor{d.s.write} }

func (d flowDB) InTx(ctx context.Context, fn func(tx flow.Executor) error) error {
	return d.s.inTx(ctx, func(tx *txn) error { return fn(executor{tx}) })
}

func (flowDB) Time(t time.Time) any    { return dbTime(t) }
func (flowDB) Times() flow.TimeColumns { return cols }

// ForUpdate is "": the one writer's transactions take turns.
func (flowDB) ForUpdate() string { return "" }

// SkipLocked is "", as ForUpdate.
func (flowDB) SkipLocked() string { return "" }

// RowKey is the rowid, which SQLite finds a row by without an index (a
// delivery id is found through one: migration 16).
func (flowDB) RowKey() string { return "rowid" }

// sqlQuerier is a *sql.DB or a *txn.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor runs the flows' statements on q, their placeholders numbered
// as SQLite numbers them (numbered). The engine's own statements, written
// with ?, pass through it as they are (queryAll).
type executor struct{ q sqlQuerier }

func (e executor) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := e.q.ExecContext(ctx, numbered(query), args...)
	if err != nil {
		return 0, interpretError(err)
	}
	return res.RowsAffected()
}

func (e executor) QueryRow(ctx context.Context, query string, args ...any) flow.Scanner {
	if tx, ok := e.q.(*txn); ok {
		return row{tx.queryRowKept(ctx, numbered(query), args...)}
	}
	return row{e.q.QueryRowContext(ctx, numbered(query), args...)}
}

func (e executor) Query(ctx context.Context, query string, args ...any) (flow.Rows, error) {
	if tx, ok := e.q.(*txn); ok {
		// The rows' Close is seen here, so the statement can be a kept one.
		rows, done, err := tx.queryKept(ctx, numbered(query), args...)
		if err != nil {
			return nil, err
		}
		return sqlRows{rows, done}, nil
	}
	rows, err := e.q.QueryContext(ctx, numbered(query), args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows, nil}, nil
}

// sqlRows are database/sql rows as flow.Rows, whose Close drops the
// error of closing (what the rows' reader sees is Err's) and then calls
// done, when set.
type sqlRows struct {
	*sql.Rows
	done func()
}

func (r sqlRows) Close() {
	_ = r.Rows.Close()
	if r.done != nil {
		r.done()
	}
}

// row is a database/sql row (or a keptRow) whose Scan says
// flow.ErrNoRows for none.
type row struct{ r scanner }

func (r row) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return flow.ErrNoRows
	}
	return err
}

// numbered rewrites a flow's placeholders, $1, $2, …, as SQLite's
// numbered ones, ?1, ?2, …, which may also stand more than once and in
// any order. A $ inside a quoted string or name is left as it is.
func numbered(query string) string {
	if !strings.Contains(query, "$") {
		return query
	}
	b := []byte(query)
	var quote byte
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '$' && i+1 < len(b) && b[i+1] >= '0' && b[i+1] <= '9':
			b[i] = '?'
		}
	}
	return string(b)
}

// cols reads times as SQLite stores them, in milliseconds.
var cols = flow.TimeColumns{
	Time:     func(t *time.Time) any { return timeCol{t} },
	NullTime: func(t **time.Time) any { return nullTimeCol{t} },
}

// timeCol scans an INTEGER millisecond column into a time.Time.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(v any) error {
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("time column: unexpected %T", v)
	}
	*c.t = time.UnixMilli(n).UTC()
	return nil
}

// nullTimeCol scans a nullable INTEGER millisecond column into a *time.Time.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(v any) error {
	if v == nil {
		*c.t = nil
		return nil
	}
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("time column: unexpected %T", v)
	}
	t := time.UnixMilli(n).UTC()
	*c.t = &t
	return nil
}

// DeliveryCounts: the counts migration 23's triggers keep in place, on
// the one writer; the condition on the table itself (as a subquery of its
// own, a page of hosts took 25–60 % longer).
func (flowDB) DeliveryCounts(of string) string {
	if of == "" {
		return "delivery_counts"
	}
	return "delivery_counts WHERE " + of
}

// Strings binds a list as a JSON array, read by json_each.
func (flowDB) Strings(v []string) any {
	b, _ := json.Marshal(v) // strings always marshal
	return string(b)
}

func (flowDB) IsOneOf(col, param string) string {
	return col + " IN (SELECT value FROM json_each(" + param + "))"
}
