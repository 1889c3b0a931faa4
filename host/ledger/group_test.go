package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// holdWriter takes the writer's only connection and has a record of
// "first" wait for it: writes made after it queue up behind that one.
// release gives the connection back; first brings that record's result.
func holdWriter(t *testing.T, l *Ledger) (release func(), first <-chan error) {
	t.Helper()
	conn, err := l.write.Conn(context.Background())
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { conn.Close() }) }
	t.Cleanup(release)
	waits := l.write.Stats().WaitCount
	first = recordAsync(context.Background(), l, "first")
	require.Eventually(t, func() bool { return l.write.Stats().WaitCount > waits }, 10*time.Second, time.Millisecond,
		"the writer waits for its connection")
	require.Zero(t, len(l.ops))
	return release, first
}

// waitQueued waits until n writes wait in the writer's queue.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.ops) == n }, 10*time.Second, time.Millisecond, "%d writes queued", n)
}

// recordAsync records id in a goroutine; the result arrives on the channel.
func recordAsync(ctx context.Context, l *Ledger, id string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry(id, ResultSuccess, t0)})
		ch <- err
	}()
	return ch
}

func outboxIDs(t *testing.T, l *Ledger) []string {
	t.Helper()
	ob, err := l.OutboxList(context.Background(), 10000)
	require.NoError(t, err)
	var ids []string
	for _, e := range ob {
		ids = append(ids, e.DeliveryID)
	}
	return ids
}

// TestGroupCommitConcurrentRecords: records made at once share
// transactions, and each returns only once its row and its ack are durable:
// a ledger opened again holds every one.
func TestGroupCommitConcurrentRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := openNew(t)

	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			attempts, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry(fmt.Sprintf("d%d", i), ResultSuccess, t0)})
			if err == nil && attempts != 1 {
				err = fmt.Errorf("d%d: attempts %d", i, attempts)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Less(t, l.commits.Load(), int64(n), "concurrent records share transactions")

	// What returned is on disk: a second reader, independent of the
	// writer's connection, sees it all.
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var rows, acks int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&rows))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE kind = 'ack'`).Scan(&acks))
	require.Equal(t, n, rows)
	require.Equal(t, n, acks)
	require.NoError(t, l.Close())

	l = reopen(t, path)
	require.Len(t, outboxIDs(t, l), n)
}

// TestGroupCommitOneFailureFailsAlone: a record the database refuses fails
// with its own error; the others of its transaction are retried alone and
// commit.
func TestGroupCommitOneFailureFailsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	refuseBad(t, l)

	release, first := holdWriter(t, l)
	ids := []string{"good1", "bad1", "good2", "good3"}
	results := map[string]<-chan error{}
	for _, id := range ids {
		results[id] = recordAsync(ctx, l, id)
	}
	waitQueued(t, l, len(ids)) // all four go into one transaction
	before := l.commits.Load()
	release()

	require.NoError(t, <-first)
	for _, id := range ids {
		err := <-results[id]
		if id == "bad1" {
			require.ErrorContains(t, err, "refused by trigger")
			continue
		}
		require.NoError(t, err, id)
	}
	// "first" alone; then the group fails and is retried one by one, the
	// three good records each in a transaction of its own.
	require.Equal(t, before+4, l.commits.Load())
	_, err := l.DeliveryGet(ctx, "bad1")
	require.ErrorIs(t, err, ErrNotFound)
	require.ElementsMatch(t, []string{"first", "good1", "good2", "good3"}, outboxIDs(t, l), "no ack for the refused record")
}

// refuseBad makes l's database refuse to record a delivery whose id starts
// with "bad" ("refused by trigger").
func refuseBad(t *testing.T, l *Ledger) {
	t.Helper()
	_, err := l.write.ExecContext(context.Background(), `CREATE TRIGGER refuse BEFORE INSERT ON ledger
		WHEN NEW.delivery_id LIKE 'bad%' BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END`)
	require.NoError(t, err)
}

// TestGroupCommitCanceledWhileQueued: a caller that gives up while its record
// still waits for the writer gets its context's error, and the record is
// not written; the others of the queue are.
func TestGroupCommitCanceledWhileQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)

	release, first := holdWriter(t, l)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := recordAsync(cctx, l, "gave-up")
	kept := recordAsync(ctx, l, "kept")
	waitQueued(t, l, 2)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	release()

	require.NoError(t, <-first)
	require.NoError(t, <-kept)
	_, err := l.DeliveryGet(ctx, "gave-up")
	require.ErrorIs(t, err, ErrNotFound)
	require.ElementsMatch(t, []string{"first", "kept"}, outboxIDs(t, l))
}

// TestCloseCommitsQueuedWrites: Close lets the writes already queued commit;
// writes after it fail.
func TestCloseCommitsQueuedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, path := openNew(t)

	release, first := holdWriter(t, l)
	queued := recordAsync(ctx, l, "queued")
	waitQueued(t, l, 1)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	release()
	require.NoError(t, <-first)
	require.NoError(t, <-queued)
	require.NoError(t, <-closed)
	_, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry("late", ResultSuccess, t0)})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "late", Kind: OutboxAck}), ErrClosed)

	l = reopen(t, path)
	require.ElementsMatch(t, []string{"first", "queued"}, outboxIDs(t, l))
}

// TestGroupCommitMixesWrites: a record, a re-enqueued ack and an outbox
// cleanup in one transaction each do what they do alone.
func TestGroupCommitMixesWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	record(t, l, entry("sent", ResultSuccess, t0))
	sent := outbox(t, l)
	require.Len(t, sent, 1)

	release, first := holdWriter(t, l)
	rec := recordAsync(ctx, l, "new")
	again := make(chan error, 1)
	go func() {
		again <- l.OutboxEnqueue(ctx, OutboxEntry{DeliveryID: "old", Kind: OutboxAck, CreatedAt: t0})
	}()
	del := make(chan error, 1)
	go func() { del <- l.OutboxDelete(ctx, []int64{sent[0].Seq}) }()
	waitQueued(t, l, 3)
	before := l.commits.Load()
	release()
	for _, ch := range []<-chan error{first, rec, again, del} {
		require.NoError(t, <-ch)
	}
	require.Equal(t, before+2, l.commits.Load(), "the three queued writes share one transaction")
	require.ElementsMatch(t, []string{"first", "new", "old"}, outboxIDs(t, l))
}

// TestGroupCommitCountsAttempts: each record in a shared transaction
// learns its own row's attempts, a first record 1 and a re-record one more
// than before.
func TestGroupCommitCountsAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	for range 2 {
		record(t, l, entry("again", ResultError, t0))
	}

	release, first := holdWriter(t, l)
	type result struct {
		attempts int
		err      error
	}
	record := func(id string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			n, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry(id, ResultSuccess, t0)})
			ch <- result{n, err}
		}()
		return ch
	}
	again, fresh := record("again"), record("fresh")
	waitQueued(t, l, 2)
	before := l.commits.Load()
	release()
	require.NoError(t, <-first)
	require.Equal(t, result{3, nil}, <-again)
	require.Equal(t, result{1, nil}, <-fresh)
	require.Equal(t, before+2, l.commits.Load(), "the two queued records share one transaction")
}

// TestDeliveriesDone: one lookup answers which of a batch are done.
func TestDeliveriesDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	for id, r := range map[string]Result{"ok": ResultSuccess, "skip": ResultSkipped, "failed": ResultError} {
		record(t, l, entry(id, r, t0))
	}
	done, err := l.DeliveriesDone(ctx, []string{"ok", "skip", "failed", "new", `we"ird\id`})
	require.NoError(t, err)
	require.Equal(t, map[string]Result{"ok": ResultSuccess, "skip": ResultSkipped}, done)
	done, err = l.DeliveriesDone(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, done)
}

// TestEncodeFields: the fields' JSON reads back as the fields, whatever
// their characters, and is what json.Marshal writes for them.
func TestEncodeFields(t *testing.T) {
	t.Parallel()
	for _, fields := range []map[string]string{
		{"github.repo": "acme/app", "github.number": "7", "github.action": "opened"},
		{"slack.text": "quote \" backslash \\ newline \n tab \t cr \r nul \x00 bell \x07 <html> & ünïcødé ✓ 日本語"},
		{"": ""},
		{"bad": "invalid \xff utf-8"},
	} {
		got, err := encodeFields(fields)
		require.NoError(t, err)
		var back map[string]string
		require.NoError(t, json.Unmarshal([]byte(got), &back), got)
		want, err := json.Marshal(fields)
		require.NoError(t, err)
		var wantBack map[string]string
		require.NoError(t, json.Unmarshal(want, &wantBack))
		require.Equal(t, wantBack, back)
		if fields["bad"] == "" {
			require.Equal(t, fields, back)
		}
	}
}

// The wait for more writes ends when the group is full: what is left waits
// for the next transaction.
func TestGatherStopsAtAFullGroup(t *testing.T) {
	l := &Ledger{ops: make(chan *op, maxGroup+10), closing: make(chan struct{})}
	for range maxGroup + 10 {
		l.ops <- &op{}
	}
	batch := l.gather([]*op{{}, {}})
	require.Len(t, batch, maxGroup)
	require.Len(t, l.ops, 12)
}
