package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared/dbfile/dbfiletest"
)

func setup(t *testing.T) (*Ledger, string) {
	t.Helper()
	l, path := openNew(t)
	t.Cleanup(func() { l.Close() })
	return l, path
}

// openNew opens a new ledger file, for a test that closes it itself.
func openNew(t *testing.T) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(context.Background(), path)
	require.NoError(t, err)
	return l, path
}

// reopen opens the ledger file at path again, closed when the test ends.
func reopen(t *testing.T, path string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// outbox lists l's outbox, up to ten entries.
func outbox(t *testing.T, l *Ledger) []OutboxEntry {
	t.Helper()
	ob, err := l.OutboxList(context.Background(), 10)
	require.NoError(t, err)
	return ob
}

// listed counts the deliveries l lists, up to ten.
func listed(t *testing.T, l *Ledger) int {
	t.Helper()
	page, _, err := l.DeliveryList(context.Background(), ListParams{Limit: 10})
	require.NoError(t, err)
	return len(page)
}

// record records e in l, which must take it.
func record(t *testing.T, l *Ledger, e Entry) {
	t.Helper()
	_, err := l.DeliveryRecord(context.Background(), RecordParams{Entry: e})
	require.NoError(t, err)
}

// requireCount requires count (a ledger's OutboxCount or DeliveryCount) to
// answer want.
func requireCount(t *testing.T, want int, count func(context.Context) (int, error)) {
	t.Helper()
	n, err := count(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, n)
}

var t0 = time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)

// ledgerAt makes a ledger of an older schema, its first version
// migrations, and returns it open on a plain connection, for a test to
// fill and close before Open migrates it; and its path.
func ledgerAt(t *testing.T, version int) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	for _, m := range migrations[:version] {
		_, err = db.Exec(m)
		require.NoError(t, err)
	}
	_, err = db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, version))
	require.NoError(t, err)
	return db, path
}

func entry(id string, r Result, at time.Time) Entry {
	return Entry{
		DeliveryID: id, Source: "github", EventType: "pull_request", EventAction: "opened",
		ProcessedAt: at, Result: r, DurationMS: 12, CorrelationID: "corr-" + id,
		Handler: "forward http://127.0.0.1:3000/github", Summary: "acme/app #7",
	}
}

func TestRecordAndGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	_, err := l.DeliveryGet(ctx, "github:a:1")
	require.ErrorIs(t, err, ErrNotFound)

	e := entry("github:a:1", ResultSuccess, t0)
	e.ReceivedAt = t0.Add(-time.Second)
	e.CloudAttempt = 2
	e.ResponseStatus = ptr(202)
	e.Output = "thanks"
	e.Fields = map[string]string{"github.repo": "acme/app", "github.number": "7"}
	attempts, err := l.DeliveryRecord(ctx, RecordParams{Entry: e})
	require.NoError(t, err)
	require.Equal(t, 1, attempts)

	got, err := l.DeliveryGet(ctx, "github:a:1")
	require.NoError(t, err)
	e.Attempts = 1
	require.Equal(t, e, got)
	require.True(t, got.Result.Done())

	// A later run replaces every column; absent values read back as absent.
	again := entry("github:a:1", ResultError, t0.Add(time.Minute))
	again.ExitCode, again.Error = ptr(3), "exit 3: no"
	_, err = l.DeliveryRecord(ctx, RecordParams{Entry: again, Retryable: true})
	require.NoError(t, err)
	got, err = l.DeliveryGet(ctx, "github:a:1")
	require.NoError(t, err)
	again.Attempts = 2
	again.Retryable = ptr(true) // the nack's, kept with the row
	require.Equal(t, again, got)
	require.Nil(t, got.ResponseStatus)
	require.Nil(t, got.Fields)

	// A success after it: retryable is an error's only.
	e.ProcessedAt = t0.Add(2 * time.Minute)
	e.Retryable = ptr(false) // ignored: the ledger decides
	record(t, l, e)
	got, err = l.DeliveryGet(ctx, "github:a:1")
	require.NoError(t, err)
	require.Nil(t, got.Retryable)
	final := entry("github:a:2", ResultError, t0)
	_, err = l.DeliveryRecord(ctx, RecordParams{Entry: final, Retryable: false})
	require.NoError(t, err)
	got, err = l.DeliveryGet(ctx, "github:a:2")
	require.NoError(t, err)
	require.Equal(t, ptr(false), got.Retryable, "a failure not tried again says so")
}

func TestRecordWritesOutboxInSameTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	record(t, l, entry("d1", ResultSuccess, t0))
	failed := entry("d2", ResultError, t0.Add(time.Second))
	failed.Error = "HTTP 503: busy"
	failed.CloudAttempt = 3
	_, err := l.DeliveryRecord(ctx, RecordParams{Entry: failed, Retryable: true})
	require.NoError(t, err)

	ob := outbox(t, l)
	require.Len(t, ob, 2)
	require.Equal(t, "d1", ob[0].DeliveryID)
	require.Equal(t, OutboxAck, ob[0].Kind)
	require.Equal(t, "d2", ob[1].DeliveryID)
	require.Equal(t, OutboxNack, ob[1].Kind)
	require.Equal(t, "HTTP 503: busy", ob[1].Error)
	require.True(t, ob[1].Retryable)
	require.Equal(t, 3, ob[1].Attempt, "the nack names the attempt it reports")
	require.Equal(t, &RunResult{Result: ResultError, Attempt: 3, Handler: failed.Handler, ResponseStatus: failed.ResponseStatus,
		ExitCode: failed.ExitCode, DurationMS: failed.DurationMS, Error: "HTTP 503: busy"}, ob[1].Ran,
		"each entry carries the ledger's record of its run, reported beside the nack")
	require.Equal(t, ResultSuccess, ob[0].Ran.Result)
	require.NoError(t, l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "never-ran", Kind: OutboxNack, CreatedAt: t0}))
	ob = outbox(t, l)
	require.Nil(t, ob[2].Ran, "a webhook that never ran has no record to report")
	require.NoError(t, l.OutboxDelete(ctx, []int64{ob[2].Seq}))

	// A failing outbox write rolls back the ledger row: invalid results are
	// refused before anything is written, and a record is all or nothing.
	_, err = l.DeliveryRecord(ctx, RecordParams{Entry: entry("d3", Result("bogus"), t0)})
	require.Error(t, err)
	_, err = l.DeliveryGet(ctx, "d3")
	require.ErrorIs(t, err, ErrNotFound)

	// Re-recording the same delivery counts an attempt and replaces its
	// pending outbox entry rather than adding a second one.
	attempts, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry("d2", ResultSuccess, t0.Add(2*time.Second))})
	require.NoError(t, err)
	require.Equal(t, 2, attempts)
	ob = outbox(t, l)
	require.Len(t, ob, 2)
	require.Equal(t, "d2", ob[1].DeliveryID)
	require.Equal(t, OutboxAck, ob[1].Kind)
	requireCount(t, 2, l.OutboxCount)
}

func TestRecordRollsBackOnOutboxFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	// Break the outbox so that the second half of the transaction fails.
	_, err := l.write.ExecContext(ctx, `DROP TABLE outbox`)
	require.NoError(t, err)
	_, err = l.DeliveryRecord(ctx, RecordParams{Entry: entry("d1", ResultSuccess, t0)})
	require.Error(t, err)
	_, err = l.DeliveryGet(ctx, "d1")
	require.ErrorIs(t, err, ErrNotFound, "ledger row must not survive a failed outbox write")
}

func TestOutboxDeleteOnlySent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	for _, id := range []string{"a", "b"} {
		record(t, l, entry(id, ResultSuccess, t0))
	}
	sent := outbox(t, l)
	require.Len(t, sent, 2)

	// While the heartbeat is in flight, "b" is acked again and "c" arrives.
	require.NoError(t, l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "b", Kind: OutboxAck, CreatedAt: t0}))
	record(t, l, entry("c", ResultSuccess, t0))

	require.NoError(t, l.OutboxDelete(ctx, []int64{sent[0].Seq, sent[1].Seq}))
	left := outbox(t, l)
	require.Len(t, left, 2)
	require.Equal(t, "b", left[0].DeliveryID)
	require.Equal(t, "c", left[1].DeliveryID)
}

func TestReopenKeepsOutboxAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := openNew(t)
	record(t, l, entry("d1", ResultSuccess, t0))
	require.NoError(t, l.Close())

	for range 2 {
		l, err := Open(ctx, path)
		require.NoError(t, err)
		ob := outbox(t, l)
		require.Len(t, ob, 1)
		require.Equal(t, "d1", ob[0].DeliveryID)
		got, err := l.DeliveryGet(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, ResultSuccess, got.Result)
		var mode string
		require.NoError(t, l.write.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
		require.Equal(t, "wal", mode)
		var sync int
		require.NoError(t, l.write.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync))
		require.Equal(t, 2, sync, "synchronous=FULL")
		require.NoError(t, l.Close())
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	// 7 entries, one second apart; every third is an error from stripe.
	for i := range 7 {
		e := entry(fmt.Sprintf("d%d", i), ResultSuccess, t0.Add(time.Duration(i)*time.Second))
		if i%3 == 0 {
			e.Result, e.Source, e.Error = ResultError, "stripe", "boom"
		}
		record(t, l, e)
	}
	// Two entries at the same millisecond: the cursor must not skip either.
	record(t, l, entry("same-a", ResultSkipped, t0.Add(10*time.Second)))
	record(t, l, entry("same-b", ResultSkipped, t0.Add(10*time.Second)))

	ids := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.DeliveryID)
		}
		return out
	}

	var (
		all    []string
		cursor string
		pages  int
	)
	for {
		page, next, err := l.DeliveryList(ctx, ListParams{Limit: 2, Cursor: cursor})
		require.NoError(t, err)
		all = append(all, ids(page)...)
		pages++
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"same-b", "same-a", "d6", "d5", "d4", "d3", "d2", "d1", "d0"}, all)
	require.Equal(t, 5, pages)

	page, next, err := l.DeliveryList(ctx, ListParams{Limit: 10, Result: ResultError})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, []string{"d6", "d3", "d0"}, ids(page))

	page, _, err = l.DeliveryList(ctx, ListParams{Limit: 10, Result: ResultSkipped})
	require.NoError(t, err)
	require.Equal(t, []string{"same-b", "same-a"}, ids(page))
	page, _, err = l.DeliveryList(ctx, ListParams{Limit: 10, Result: ResultSuccess})
	require.NoError(t, err)
	require.Equal(t, []string{"d5", "d4", "d2", "d1"}, ids(page))

	page, _, err = l.DeliveryList(ctx, ListParams{Limit: 10, Source: "stripe", Since: t0.Add(3 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []string{"d6", "d3"}, ids(page))

	page, _, err = l.DeliveryList(ctx, ListParams{Limit: 10, Source: "nope"})
	require.NoError(t, err)
	require.NotNil(t, page)
	require.Empty(t, page)

	for _, bad := range []string{"!!!", "bm8tc2VwYXJhdG9y", encodeCursor(1, "")} {
		_, _, err = l.DeliveryList(ctx, ListParams{Limit: 10, Cursor: bad})
		require.ErrorIs(t, err, ErrInvalidCursor, bad)
	}
}

// TestMigratesVersion1 opens a ledger written by the first schema: its rows
// survive and read back with the new columns empty.
func TestMigratesVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := ledgerAt(t, 1)
	_, err := db.ExecContext(ctx, `INSERT INTO ledger (delivery_id, source, processed_at, result, summary)
		VALUES ('old:1', 'github', ?, 'success', 'push: acme/app')`, t0.UnixMilli())
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox (delivery_id, kind, error, retryable, created_at)
		VALUES ('old:2', 'nack', 'boom', 1, ?)`, t0.UnixMilli())
	require.NoError(t, err)
	require.NoError(t, db.Close())

	_, err = OpenReadOnly(ctx, path)
	require.ErrorContains(t, err, fmt.Sprintf("schema version 1 is older than this binary's (%d): start `host run` once", len(migrations)))

	l := reopen(t, path)
	got, err := l.DeliveryGet(ctx, "old:1")
	require.NoError(t, err)
	require.Equal(t, Entry{DeliveryID: "old:1", Source: "github", ProcessedAt: t0, Result: ResultSuccess,
		Attempts: 1, Summary: "push: acme/app"}, got)
	ob := outbox(t, l)
	require.Len(t, ob, 1, "a pending nack survives the upgrade")
	require.Equal(t, OutboxEntry{Seq: ob[0].Seq, DeliveryID: "old:2", Kind: OutboxNack, Error: "boom", Retryable: true, CreatedAt: t0}, ob[0],
		"with attempt 0: the cloud applies it to the current attempt")
}

// TestOutboxKeepsHandBackAcrossReopen: a nack handing back a webhook never
// started says so after the ledger is closed and opened again (a host
// restarting before its last report reached the cloud), and a later
// outcome of the same delivery replaces it without the flag.
func TestOutboxKeepsHandBackAcrossReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := openNew(t)
	back := OutboxEntry{DeliveryID: "d1", Kind: OutboxNack, Error: "host stopping: not started", Retryable: true,
		Attempt: 2, NotStarted: true, CreatedAt: t0}
	require.NoError(t, l.OutboxEnqueue(ctx, back))
	require.NoError(t, l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "d2", Kind: OutboxNack, Error: "boom", Retryable: true,
		Attempt: 1, CreatedAt: t0}))
	require.NoError(t, l.Close())

	l = reopen(t, path)
	ob := outbox(t, l)
	require.Len(t, ob, 2)
	back.Seq = ob[0].Seq
	require.Equal(t, back, ob[0])
	require.False(t, ob[1].NotStarted, "an ordinary nack does not say it")

	e := entry("d1", ResultError, t0.Add(time.Second))
	e.CloudAttempt = 3
	_, err := l.DeliveryRecord(ctx, RecordParams{Entry: e, Retryable: true})
	require.NoError(t, err)
	ob = outbox(t, l)
	require.Len(t, ob, 2)
	require.Equal(t, "d1", ob[1].DeliveryID)
	require.False(t, ob[1].NotStarted, "the run's nack replaced the hand-back")
}

// TestMigratesPendingHandBackColumn: a ledger of the schema before
// not_started keeps its pending nacks, read as ordinary ones (it cannot
// tell), and records hand-backs once migrated.
func TestMigratesPendingHandBackColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := ledgerAt(t, 4) // the schema before not_started
	_, err := db.ExecContext(ctx, `INSERT INTO outbox (delivery_id, kind, error, retryable, attempt, created_at)
		VALUES ('old:1', 'nack', 'host stopping: not started', 1, 1, ?)`, t0.UnixMilli())
	require.NoError(t, err)
	require.NoError(t, db.Close())

	l := reopen(t, path)
	ob := outbox(t, l)
	require.Equal(t, []OutboxEntry{{Seq: ob[0].Seq, DeliveryID: "old:1", Kind: OutboxNack, Error: "host stopping: not started",
		Retryable: true, Attempt: 1, CreatedAt: t0}}, ob)
	require.NoError(t, l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "new:1", Kind: OutboxNack, Retryable: true,
		Attempt: 1, NotStarted: true, CreatedAt: t0}))
	ob = outbox(t, l)
	require.Len(t, ob, 2)
	require.True(t, ob[1].NotStarted)
}

// TestMigratesToTheKeyedLedger: a ledger keyed by the delivery id alone
// (schema 5) is built again keyed in arrival order (see idKey) with every
// row and column kept; a delivery recorded before counts its attempts on,
// and is still found done.
func TestMigratesToTheKeyedLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := ledgerAt(t, 5)
	// Two ids that end alike: the key's leading part is not unique alone.
	const a, b = "github:3f2c9a4e-1b7d-4c1a-9e0f-5d6b7a8c9d0e:1771236000000", "stripe:evt_1:1771236000000"
	_, err := db.ExecContext(ctx, `INSERT INTO ledger (delivery_id, source, event_type, event_action, processed_at, result,
		attempts, error, duration_ms, correlation_id, handler, summary, received_at, cloud_attempt, response_status,
		exit_code, output, fields)
		VALUES (?, 'github', 'push', '', ?, 'error', 2, 'HTTP 500', 12, 'corr-a', 'forward http://127.0.0.1:3000/github',
			'push: acme/app', ?, 2, 500, NULL, 'boom', '{"github.repo":"acme/app"}'),
		(?, 'stripe', 'invoice.paid', '', ?, 'success', 1, '', 3, 'corr-b', 'exec ./paid', '', ?, 1, NULL, 0, '', '{}')`,
		a, t0.UnixMilli(), t0.UnixMilli()-50, b, t0.UnixMilli()+1, t0.UnixMilli()-40)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox (delivery_id, kind, error, retryable, attempt, created_at)
		VALUES (?, 'nack', 'HTTP 500', 1, 2, ?)`, a, t0.UnixMilli())
	require.NoError(t, err)
	require.NoError(t, db.Close())

	l := reopen(t, path)
	got, err := l.DeliveryGet(ctx, a)
	require.NoError(t, err)
	require.Equal(t, Entry{DeliveryID: a, Source: "github", EventType: "push", ProcessedAt: t0, Result: ResultError,
		Attempts: 2, Error: "HTTP 500", DurationMS: 12, CorrelationID: "corr-a", Handler: "forward http://127.0.0.1:3000/github",
		Summary: "push: acme/app", ReceivedAt: t0.Add(-50 * time.Millisecond), CloudAttempt: 2, ResponseStatus: ptr(500),
		Output: "boom", Fields: map[string]string{"github.repo": "acme/app"}}, got)
	got, err = l.DeliveryGet(ctx, b)
	require.NoError(t, err)
	require.Equal(t, ResultSuccess, got.Result)
	require.Equal(t, ptr(0), got.ExitCode)
	ob := outbox(t, l)
	require.Len(t, ob, 1)
	require.NotNil(t, ob[0].Ran, "the outbox still finds its ledger row")
	require.Equal(t, RunResult{Result: ResultError, Attempt: 2, Handler: "forward http://127.0.0.1:3000/github",
		ResponseStatus: ptr(500), DurationMS: 12, Error: "HTTP 500"}, *ob[0].Ran)

	e := entry(a, ResultSuccess, t0.Add(time.Second))
	n, err := l.DeliveryRecord(ctx, RecordParams{Entry: e})
	require.NoError(t, err)
	require.Equal(t, 3, n, "the row recorded before counts on")
	done, err := l.DeliveriesDone(ctx, []string{a, b, "github:new:1771236000000"})
	require.NoError(t, err)
	require.Equal(t, map[string]Result{a: ResultSuccess, b: ResultSuccess}, done)
	requireCount(t, 2, l.DeliveryCount)
}

// TestReadOnlyWhileWriterOpen reads a ledger another connection is writing
// (as `host ledger` does while `host run` runs), and after the writer closed.
func TestReadOnlyWhileWriterOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := setup(t)
	record(t, l, entry("d1", ResultSuccess, t0))

	ro, err := OpenReadOnly(ctx, path)
	require.NoError(t, err)
	got, err := ro.DeliveryGet(ctx, "d1")
	require.NoError(t, err)
	require.Equal(t, ResultSuccess, got.Result)
	// A write after the reader opened is visible to it.
	record(t, l, entry("d2", ResultError, t0.Add(time.Second)))
	page, _, err := ro.DeliveryList(ctx, ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page, 2)
	// It cannot write.
	require.ErrorIs(t, ro.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "x", Kind: OutboxAck}), ErrReadOnly)
	_, err = ro.read.ExecContext(ctx, `DELETE FROM ledger`)
	require.Error(t, err, "the connection itself is read-only")
	require.NoError(t, ro.Close())

	require.NoError(t, l.Close())
	ro, err = OpenReadOnly(ctx, path)
	require.NoError(t, err)
	page, _, err = ro.DeliveryList(ctx, ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.NoError(t, ro.Close())

	missing := filepath.Join(t.TempDir(), "none.db")
	_, err = OpenReadOnly(ctx, missing)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "never created")
}

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	for i := range 5 {
		record(t, l, entry(fmt.Sprintf("d%d", i), ResultSuccess, t0.Add(time.Duration(i)*time.Hour)))
	}
	reportAll(t, l) // retention keeps rows whose outcome waits
	n, err := l.DeliveryPrune(ctx, t0.Add(3*time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "bounded by the limit, oldest first")
	_, err = l.DeliveryGet(ctx, "d0")
	require.ErrorIs(t, err, ErrNotFound)
	n, err = l.DeliveryPrune(ctx, t0.Add(3*time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	page, _, err := l.DeliveryList(ctx, ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page, 2)
}

// reportAll empties the outbox, as the cloud's confirm of every pending
// outcome does.
func reportAll(t *testing.T, l *Ledger) {
	t.Helper()
	ob, err := l.OutboxList(context.Background(), 1000)
	require.NoError(t, err)
	for _, o := range ob {
		require.NoError(t, l.OutboxDelete(context.Background(), []int64{o.Seq}))
	}
}

func TestRetentionLoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	l, _ := setup(t)
	clock := clockwork.NewFakeClockAt(t0.Add(31 * 24 * time.Hour))
	for i, at := range []time.Time{t0, t0.Add(24 * time.Hour), t0.Add(3 * 24 * time.Hour)} {
		record(t, l, entry(fmt.Sprintf("d%d", i), ResultSuccess, at))
	}
	reportAll(t, l) // retention keeps rows whose outcome waits
	r := &Retention{Ledger: l, MaxAge: 30 * 24 * time.Hour, Interval: time.Hour, Batch: 1, Clock: clock,
		Logger: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	// At start: older than 30 days at t0+31d is only d0 (in batches of one).
	require.Eventually(t, func() bool { return listed(t, l) == 2 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(24 * time.Hour) // the ticker fires; d1 is now 31 days old
	require.Eventually(t, func() bool { return listed(t, l) == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err := l.DeliveryGet(ctx, "d2")
	require.NoError(t, err)

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("retention loop did not stop")
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	got, err := ParseSince("1h", t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(-time.Hour), got)
	got, err = ParseSince("2026-02-16T09:00:00Z", t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(-time.Hour), got)
	for _, bad := range []string{"yesterday", "-1h", "0s", ""} {
		_, err = ParseSince(bad, t0)
		require.ErrorContains(t, err, "invalid since", bad)
	}
}

// TestRetentionOnCloudTime: rows are stamped with this host's clock; a host
// clock that jumped a week ahead does not make today's rows old, because
// their age is measured against the cloud's time too; until the cloud's
// time is known nothing is pruned.
func TestRetentionOnCloudTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, _ := setup(t)
	// Recorded today, before the host's clock jumped a week ahead.
	for i, at := range []time.Time{t0.Add(-2 * 24 * time.Hour), t0.Add(-time.Hour), t0} {
		record(t, l, entry(fmt.Sprintf("d%d", i), ResultSuccess, at))
	}
	reportAll(t, l)                                               // retention keeps rows whose outcome waits
	clock := clockwork.NewFakeClockAt(t0.Add(7 * 24 * time.Hour)) // the host's clock, a week ahead
	var mu sync.Mutex
	var cloud time.Time // zero: not known yet
	r := &Retention{Ledger: l, MaxAge: 24 * time.Hour, Interval: time.Hour, Batch: 10, Clock: clock,
		CloudNow: func() (time.Time, bool) {
			mu.Lock()
			defer mu.Unlock()
			return cloud, !cloud.IsZero()
		},
		Logger: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	// The cloud's time unknown: nothing pruned, asked again in a minute.
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	require.Equal(t, 3, listed(t, l))
	mu.Lock()
	cloud = t0.Add(time.Minute)
	mu.Unlock()
	clock.Advance(time.Minute)
	// On the cloud's time only d0 (two days old) is past a day.
	require.Eventually(t, func() bool { return listed(t, l) == 2 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	_, err := l.DeliveryGet(ctx, "d1")
	require.NoError(t, err, "an hour-old row is kept although this host's clock says it is a week old")

	// A host clock behind the cloud's is its own measure: rows it stamped
	// are pruned on it, not earlier.
	mu.Lock()
	cloud = t0.Add(30 * 24 * time.Hour)
	mu.Unlock()
	clock.Advance(time.Hour) // the host's clock: t0+7d+1h+1m
	require.Eventually(t, func() bool { return listed(t, l) == 0 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

// TestLookUpsUseTheKey: every look-up of ledger rows by delivery id is one
// search of the ledger's key per id (see idKey). Which of a batch's ids are
// done never walks the ledger's successes (an index on result would
// otherwise tempt SQLite, which has no statistics).
func TestLookUpsUseTheKey(t *testing.T) {
	l, _ := setup(t)
	for _, c := range []struct {
		name, query string
		args        []any
		search      string
	}{
		{"get", `SELECT ` + entryColumns + ` FROM ledger WHERE ` + idKey, []any{"a", "a"}, "SEARCH ledger USING INDEX ledger_key (<expr>=? AND delivery_id=?)"},
		{"done", doneQuery, []any{`["a","b"]`}, "SEARCH l USING INDEX ledger_key (<expr>=? AND delivery_id=?)"},
		{"attempts", `SELECT l.delivery_id, l.attempts FROM json_each(?) AS j JOIN ledger AS l ON ` + joinKey, []any{`["a"]`}, "SEARCH l USING INDEX ledger_key (<expr>=? AND delivery_id=?)"},
		{"outbox", outboxListQuery, []any{10}, "SEARCH l USING INDEX ledger_key (<expr>=? AND delivery_id=?)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			joined := fmt.Sprint(dbfiletest.QueryPlan(t, l.read, c.query, c.args...))
			require.Contains(t, joined, c.search, joined)
			require.NotContains(t, joined, "SCAN ledger", joined)
			require.NotContains(t, joined, "SCAN l ", joined)
			require.NotContains(t, joined, "ledger_unsuccessful", joined)
		})
	}
}

// TestUnsuccessfulListsReadTheirIndex: the failures and skips are listed
// from the index that holds only them (a success writes no entry into it);
// successes from the processed_at index.
func TestUnsuccessfulListsReadTheirIndex(t *testing.T) {
	l, _ := setup(t)
	for result, index := range map[Result]string{ResultError: "ledger_unsuccessful", ResultSkipped: "ledger_unsuccessful", ResultSuccess: "ledger_processed_at"} {
		q, args, err := listQuery(ListParams{Result: result, Limit: 10})
		require.NoError(t, err)
		joined := fmt.Sprint(dbfiletest.QueryPlan(t, l.read, q, args...))
		require.Contains(t, joined, "USING INDEX "+index, "%s: %s", result, joined)
		require.NotContains(t, joined, "TEMP B-TREE", "%s: %s", result, joined)
	}
}
