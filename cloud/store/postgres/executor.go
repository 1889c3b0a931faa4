package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaykit/relay/cloud/store/flow"
)

// flowDB is the pool as the shared flows (package flow) use it. Postgres
// takes their numbered placeholders as they are.
type flowDB struct{ pool *pgxpool.Pool }

var _ flow.DB = flowDB{}

func (d flowDB) Read() flow.Executor  { return executor{d.pool} }
func (d flowDB) Write() flow.Executor { return executor{d.pool} }

func (d flowDB) InTx(ctx context.Context, fn func(tx flow.Executor) error) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(executor{tx}) })
}

func (flowDB) Time(t time.Time) any    { return ms(t) }
func (flowDB) Times() flow.TimeColumns { return cols }
func (flowDB) ForUpdate() string       { return " FOR UPDATE" }
func (flowDB) SkipLocked() string      { return " FOR UPDATE SKIP LOCKED" }

// RowKey is the row's physical address, which Postgres finds a row by
// without an index (a Tid Scan, for each key a batch selected). A batch
// is selected and locked by the same statement that deletes it (FOR
// UPDATE, SkipLocked): a locked row cannot be moved by another's update
// meanwhile. (By the key's two columns, the delete matched the batch to
// the table as a whole: on 50,000 rows, a hash join over every one.)
func (flowDB) RowKey() string { return "ctid" }

// Strings binds a list as one text[]: a custom plan sees it as one constant
// array, matched by hashing (IN of a placeholder each compared each row
// with each one, and took planning a selectivity each).
func (flowDB) Strings(v []string) any { return v }

func (flowDB) IsOneOf(col, param string) string { return col + " = ANY(" + param + "::text[])" }

// pgxQuerier is the pool, or a transaction.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// executor runs the flows' statements on q.
type executor struct{ q pgxQuerier }

func (e executor) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := e.q.Exec(ctx, sql, args...)
	if err != nil {
		return 0, interpretError(err)
	}
	return tag.RowsAffected(), nil
}

func (e executor) QueryRow(ctx context.Context, sql string, args ...any) flow.Scanner {
	return row{e.q.QueryRow(ctx, sql, args...)}
}

func (e executor) Query(ctx context.Context, sql string, args ...any) (flow.Rows, error) {
	return e.q.Query(ctx, sql, args...)
}

// row is a pgx row whose Scan says flow.ErrNoRows for none.
type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return flow.ErrNoRows
	}
	return err
}

// cols reads timestamptz columns as times in UTC.
var cols = flow.TimeColumns{
	Time:     func(t *time.Time) any { return utcTime{t} },
	NullTime: func(t **time.Time) any { return utcNullTime{t} },
}

// utcTime scans a NOT NULL timestamptz column into a time in UTC.
type utcTime struct{ t *time.Time }

func (c utcTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		return errors.New("time column: NULL")
	}
	*c.t = v.Time.UTC()
	return nil
}

// utcNullTime scans a nullable timestamptz column into a *time.Time in
// UTC, nil for NULL.
type utcNullTime struct{ t **time.Time }

func (c utcNullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		*c.t = nil
		return nil
	}
	t := v.Time.UTC()
	*c.t = &t
	return nil
}

// DeliveryCounts: the counts folded so far and the changes recorded since
// (migration 20), added up by host and status. Writers only append
// changes, so none waits on another's count; DeliveryCountFold folds them
// in. The hosts' condition is in both parts: a semi-join (host_id IN a
// subquery) outside the sum is not pushed into it, and every host's
// counts were read and summed for a page of them (10 ms at 1,000 hosts).
func (flowDB) DeliveryCounts(of string) string {
	where := ""
	if of != "" {
		where = " WHERE " + of
	}
	return `(SELECT host_id, status, sum(n) AS n FROM (
		SELECT host_id, status, n FROM delivery_counts` + where + `
		UNION ALL SELECT host_id, status, n FROM delivery_count_changes` + where + `) kc GROUP BY host_id, status) k`
}
