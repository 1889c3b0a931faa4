// Package flow writes once the store's transactions whose SQL is the same
// on both engines — presence, alerts, their sinks and outbox, the intake
// 5xx counts, the host list with counts, rejections, the quarantine's
// reads, settings, console sessions, IP sets, purges and pruning,
// migrations — over a DB each engine implements
// (as River composes its queue over riverdriver's Executor), and the order
// in which a host's report is applied (Report), over the steps each engine
// writes in its own SQL. What is truly dialect (leasing, batch inserts,
// notify and listen, queries tuned to one planner) stays in the engines.
//
// Statements are written with numbered placeholders ($1, $2, …; one may
// stand more than once); an engine's Executor rewrites them as its driver
// wants them.
package flow

import (
	"context"
	"errors"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// ErrNoRows is what a row's Scan returns when its query found none.
var ErrNoRows = errors.New("no rows")

// Scanner is one row of a query, in either engine.
type Scanner interface{ Scan(dest ...any) error }

// Executor runs statements on one engine: on its pool, or in one of its
// transactions.
type Executor interface {
	// Exec runs a statement and returns how many rows it changed. A
	// unique or foreign key violation is store.ErrConflict or
	// store.ErrNotFound.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// QueryRow runs a query of one row; its Scan returns ErrNoRows when
	// there is none.
	QueryRow(ctx context.Context, sql string, args ...any) Scanner
	// Query runs a query; its rows are read with Next and Scan, then
	// closed.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Rows are the rows of a query, read one after the other.
type Rows interface {
	Scanner
	Next() bool
	Err() error
	Close()
}

// Dialect is what differs between the engines' SQL and values, where a
// statement is otherwise the same.
type Dialect interface {
	// Time is t as the engine binds a time: at millisecond precision, in
	// UTC.
	Time(t time.Time) any
	// Times reads the engine's time columns.
	Times() TimeColumns
	// ForUpdate is the clause that keeps the rows a SELECT read locked
	// until its transaction ends ("" for an engine whose writers take
	// turns).
	ForUpdate() string
	// SkipLocked is the clause that keeps a SELECT of rows to change from
	// waiting on, or taking, rows another transaction holds ("" for an
	// engine whose writers take turns).
	SkipLocked() string
	// RowKey is the column that names a delivery most cheaply: the
	// engine's own row id.
	RowKey() string
	// VolumeQuery is a volume count's query (store.VolumeRangeQuery) in
	// the engine's SQL and placeholders, with its arguments.
	VolumeQuery(r store.VolumeRange) (string, []any)
	// Strings is a list of strings as the engine binds one, for IsOneOf.
	Strings(v []string) any
	// IsOneOf is the condition that col is one of the list bound, by
	// Strings, as the placeholder param.
	IsOneOf(col, param string) string
	// DeliveryCounts is what follows FROM in a read of the counts the
	// engine keeps of each host's deliveries by status, rows of (host_id,
	// status, n), one for each host and status it has counted: of the
	// hosts whose host_id meets the condition of ("" for every host), the
	// condition read where the counts are kept, so that only those hosts'
	// are read. What follows it is the read's GROUP BY or its end.
	DeliveryCounts(of string) string
}

// DB is an engine's database as the flows use it.
type DB interface {
	Dialect
	// Read runs queries that only read.
	Read() Executor
	// Write runs one statement that writes, on its own.
	Write() Executor
	// InTx runs fn in one transaction, committed when fn returns nil and
	// rolled back otherwise.
	InTx(ctx context.Context, fn func(tx Executor) error) error
}

// All runs a query on q and reads every row with scan.
func All[T any](ctx context.Context, q Executor, scan func(Scanner) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
