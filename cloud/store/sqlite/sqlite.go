// Package sqlite is the cloud store on an embedded SQLite file
// (modernc.org/sqlite, pure Go), the one-node default. All writes go through
// one connection in IMMEDIATE transactions; reads use a separate pool.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/migrations"
	"github.com/relaykit/relay/shared/dbfile"
)

// Store implements store.Store on one SQLite database file.
type Store struct {
	// Shared is what both engines share, written once in package flow over
	// the Store (flowDB).
	flow.Shared

	write *sql.DB // exactly one connection: SQLite has one writer
	read  *sql.DB
	// wake, changed and stopping hold DeliveryListen's callbacks: one
	// process owns the file, so wake-ups stay in memory.
	wake, changed, stopping listeners
	// ipsets holds DeliveryListen's IPSetChanged callbacks.
	ipsets listeners
	// sockets is each host's open socket, in memory: one process owns the
	// file, so one replica holds every socket.
	sockets sockets

	stmts *stmtCache // the writer's statements, kept prepared

	// The checkpointer (see walCheckpointPages), on a connection of its own.
	ckpt      *sql.DB
	ckptPages int
	ckptPoke  chan struct{} // a write committed
	ckptStop  context.CancelFunc
	ckptDone  chan struct{}
	ckptTail  atomic.Bool // the writer copies the rest (checkpointTail)
	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// busyTimeoutMS is how long a connection waits for a lock held by another
// process (or a checkpoint) before failing with SQLITE_BUSY.
const busyTimeoutMS = 10000

// DefaultCacheMB is the writer's page cache, and the size of the pool of
// every connection's pages (see configurePageCache), unless Options say
// otherwise. At 256 concurrent senders a 64 MiB cache took the cloud to
// 170 MiB peak RSS where 8 MiB kept it at 62–65 MiB (3 KB webhooks), for
// no fewer webhooks/s: the pages it misses are read from the kernel's page
// cache. With the pool, 4 MiB took the bench's payload mix from 69–71 to
// 66 MiB peak for no more CPU per webhook, and 2 MiB to 62–63 MiB (against
// 64–65 for 4 MiB) for as much CPU per webhook; on a larger database it
// costs more: at 200,000 deliveries the insert transaction took 174–186
// µs of CPU per webhook against 158–180 (BenchmarkInsertBatch/random).
const DefaultCacheMB = 2

// walCheckpointPages is how many pages the WAL gathers before they are
// copied into the database (40 MB of 4 KiB pages), not SQLite's 1,000.
// Intake with random event ids dirties pages all over its indexes; a longer
// WAL writes each of them to the database once per checkpoint instead of
// once per commit or two.
//
// The copy is made by a checkpointer of its own (checkpointer), on its own
// connection beside the writer, not by the commit that crosses the mark:
// the one writer, which every webhook waits for, no longer stops to copy
// 40 MB; it copies only the pages committed during that copy, before its
// next transaction, which then starts the WAL over. The writer's
// wal_autocheckpoint stays, at twice the mark, should the checkpointer
// fall behind.
const walCheckpointPages = 10000

// walSizeLimit is the size, in bytes, that a WAL of checkpointPages pages
// (4 KiB, each with its 24-byte frame header) and a quarter more is cut
// back to when it starts over (journal_size_limit).
func walSizeLimit(checkpointPages int) int64 {
	return int64(checkpointPages) * (4096 + 24) * 5 / 4
}

// Options tunes a Store.
type Options struct {
	// CacheMB is the writer connection's page cache in MiB (0:
	// DefaultCacheMB). Each read connection keeps an eighth of it, at
	// least 1 MiB. The first Store of the process sizes the pool that
	// holds every connection's pages to it.
	CacheMB int
	// CheckpointPages is how many pages the WAL gathers before the
	// checkpointer copies them (0: walCheckpointPages).
	CheckpointPages int
}

// Open opens the database file at path as OpenWith does, with the default
// options.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// OpenWith opens the database file at path, creating it and its directory
// if needed, in WAL mode with synchronous=FULL and foreign keys on. The
// file and its -wal and -shm files are 0600. It does not migrate; call
// Migrate.
func OpenWith(ctx context.Context, path string, o Options) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
		return nil, fmt.Errorf("sqlite open: invalid database file path %q", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	if err := dbfile.MakePrivate(path); err != nil {
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	if o.CacheMB <= 0 {
		o.CacheMB = DefaultCacheMB
	}
	if o.CheckpointPages <= 0 {
		o.CheckpointPages = walCheckpointPages
	}
	// The process's page caches share one pool of the writer's cache_size
	// and the checkpointer's (see configurePageCache); the readers' pages
	// come out of it too, the least recently used going first.
	configurePageCache(o.CacheMB*1024 + 512)
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busyTimeoutMS)
	write, err := sql.Open("sqlite", path+"?"+common+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"+
		fmt.Sprintf("&_pragma=cache_size(%d)&_pragma=wal_autocheckpoint(%d)", -o.CacheMB*1024, 2*o.CheckpointPages)+
		// A WAL that grew past its mark (the checkpointer behind on a
		// starved machine, a long read holding it) is cut back to a
		// quarter over it when it starts over: SQLite keeps the file at
		// its largest otherwise, for good.
		fmt.Sprintf("&_pragma=journal_size_limit(%d)", walSizeLimit(o.CheckpointPages))+
		// A statement's journal (the pages it changed, kept until it ends,
		// to undo it alone) stays in memory: in a temporary file, once past
		// 64 KiB in a transaction, it cost a write system call per page
		// every statement of a drain's reports changed. It holds only what
		// one statement changes, which every write bounds.
		"&_pragma=temp_store(MEMORY)"+
		"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	// The writer opens the file first, so that WAL mode is set before any
	// reader connects.
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	read, err := sql.Open("sqlite", path+"?"+common+fmt.Sprintf("&_pragma=cache_size(%d)", -max(1, o.CacheMB/8)*1024)+"&_query_only=1")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	read.SetMaxOpenConns(max(4, runtime.NumCPU()))
	// A connection reads the planner's statistics when it loads the schema,
	// and an ANALYZE does not change the schema: a reader is replaced
	// within the hour (as often as the writer's PRAGMA optimize runs), so
	// that the readers plan with the statistics the writer gathered.
	read.SetConnMaxLifetime(time.Hour)
	if err := read.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	// The checkpointer's connection syncs as the writer does: a checkpoint
	// fsyncs the WAL before copying it and the database after.
	ckpt, err := sql.Open("sqlite", path+"?"+common+"&_pragma=synchronous(FULL)&_pragma=cache_size(-256)")
	if err == nil {
		ckpt.SetMaxOpenConns(1)
		ckpt.SetConnMaxIdleTime(0)
		ckpt.SetConnMaxLifetime(0)
		if err = ckpt.PingContext(ctx); err != nil {
			ckpt.Close()
		}
	}
	if err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("sqlite open: %w", err)
	}
	ckptCtx, stop := context.WithCancel(context.Background())
	s := &Store{write: write, read: read, wake: newListeners(), changed: newListeners(), stopping: newListeners(), ipsets: newListeners(),
		stmts: newStmtCache(), ckpt: ckpt, ckptPages: o.CheckpointPages, ckptPoke: make(chan struct{}, 1),
		ckptStop: stop, ckptDone: make(chan struct{})}
	s.Shared = flow.NewShared(flowDB{s})
	go s.checkpointer(ckptCtx)
	return s, nil
}

// Migrate applies pending migrations on the writer connection.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.MigrateReport(ctx)
	return err
}

// MigrateReport applies pending migrations, then gathers the planner's
// statistics where they are missing or stale (optimizeOnOpen).
func (s *Store) MigrateReport(ctx context.Context) (store.MigrateResult, error) {
	res, err := flow.Migrate(ctx, goose.DialectSQLite3, s.write, migrations.SQLite)
	if err != nil {
		return res, err
	}
	if _, err := s.write.ExecContext(ctx, optimizeOnOpen); err != nil {
		return res, fmt.Errorf("migrate: optimize: %w", err)
	}
	return res, nil
}

// optimizeOnOpen is what SQLite advises a long-lived connection to run
// once opened, and after a schema change: PRAGMA optimize over every table
// (0x10000), not only those this connection has queried, analyzing (0x02)
// those never analyzed or whose row counts changed much since, each
// within a bounded number of rows (an analysis limit optimize sets
// itself). Statistics let SQLite weigh one index against another by the
// rows each would read; without them it goes by rules of thumb. The
// writer then runs PRAGMA optimize every hour (StatsOptimize) and on
// Close.
const optimizeOnOpen = `PRAGMA optimize=0x10002`

func (s *Store) Ping(ctx context.Context) error {
	if err := s.write.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if err := s.read.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.ckptStop()
		<-s.ckptDone
	})
	s.stmts.close()
	// What SQLite advises before closing a connection: statistics for what
	// this process's queries found worth them (seldom anything). Closed
	// already, the writer says so at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.write.ExecContext(ctx, `PRAGMA optimize`)
	return errors.Join(s.ckpt.Close(), s.read.Close(), s.write.Close())
}

// interpretError maps SQLite errors to the store's domain errors.
func interpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, flow.ErrNoRows) {
		return store.ErrNotFound
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %s", store.ErrConflict, sqErr.Error())
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%w: %s", store.ErrNotFound, sqErr.Error())
		}
	}
	return err
}

// inTx runs fn in an IMMEDIATE transaction on the writer, committing when it
// returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *txn) error) error {
	s.checkpointTail(ctx)
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(&txn{tx, s.stmts}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.pokeCheckpointer()
	s.stmts.prepareWanted(ctx, s.write)
	return nil
}

// Times are stored as INTEGER unix milliseconds.

func dbTime(t time.Time) int64 { return t.UnixMilli() }

func dbTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

// ms truncates t to the stored precision, in UTC.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

type scanner = flow.Scanner

// placeholders returns "?, ?, …" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func statusArgs(statuses []store.Status) []any {
	out := make([]any, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// queryAll runs a query on q, a *sql.DB or a *txn, and scans every row
// with scan.
func queryAll[T any](ctx context.Context, q sqlQuerier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	return flow.All(ctx, executor{q}, scan, query, args...)
}
