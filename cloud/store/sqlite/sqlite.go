// Package sqlite is the cloud store on an embedded SQLite file
// (modernc.org/sqlite, pure Go), the one-node default. All writes go through
// one connection in IMMEDIATE transactions; reads use a separate pool.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
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
	// Alerts is the store's presence and alerting, written once for both
	// engines over the Store (flowDB).
	flow.Alerts

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

	insertMu sync.Mutex
	inserts  *insertStatements // prepared on first use; closed by Close

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
		ckpt: ckpt, ckptPages: o.CheckpointPages, ckptPoke: make(chan struct{}, 1),
		ckptStop: stop, ckptDone: make(chan struct{})}
	s.Alerts = flow.Alerts{DB: flowDB{s}}
	go s.checkpointer(ckptCtx)
	return s, nil
}

// checkpointer copies the WAL into the database once it holds
// ckptPages pages not yet copied, woken by each write's commit, until ctx
// ends (Close).
func (s *Store) checkpointer(ctx context.Context) {
	defer close(s.ckptDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.ckptPoke:
		}
		// An error leaves the copy to the next wake-up, and to the
		// writer's own autocheckpoint past twice the mark.
		_, _ = s.checkpointDue(ctx)
	}
}

// checkpointDue copies the WAL into the database (a PASSIVE checkpoint,
// alongside the writer's transactions) when it holds ckptPages pages not
// yet copied, and says whether it did. The pages committed while it copied
// are left to the writer (tail): a WAL always copied behind a running
// writer would never be started over, and would grow.
func (s *Store) checkpointDue(ctx context.Context) (bool, error) {
	var busy, frames, copied int
	if err := s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(NOOP)").Scan(&busy, &frames, &copied); err != nil {
		return false, err
	}
	if frames-copied < s.ckptPages {
		return false, nil
	}
	if err := s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
		return false, err
	}
	s.ckptTail.Store(true)
	return true, nil
}

// checkpointTail copies, on the writer's connection and before its next
// transaction, what the checkpointer left: the pages committed while it
// copied. That transaction then starts the WAL over. A PASSIVE checkpoint
// waits for no one; this one copies a few batches' pages, not the WAL's
// ckptPages.
func (s *Store) checkpointTail(ctx context.Context) {
	if s.ckptTail.CompareAndSwap(true, false) {
		// An error leaves the copy to the next checkpoint.
		_, _ = s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
	}
}

// pokeCheckpointer tells the checkpointer a write committed.
func (s *Store) pokeCheckpointer() {
	select {
	case s.ckptPoke <- struct{}{}:
	default:
	}
}

// Migrate applies pending migrations on the writer connection.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.MigrateReport(ctx)
	return err
}

func (s *Store) MigrateReport(ctx context.Context) (store.MigrateResult, error) {
	p, err := goose.NewProvider(goose.DialectSQLite3, s.write, migrations.SQLite, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	applied, err := p.Up(ctx)
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: schema version: %w", err)
	}
	return store.MigrateResult{Applied: len(applied), Version: v}, nil
}

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
	s.insertMu.Lock()
	if s.inserts != nil {
		s.inserts.close()
		s.inserts = nil
	}
	s.insertMu.Unlock()
	return errors.Join(s.ckpt.Close(), s.read.Close(), s.write.Close())
}

// interpretError maps SQLite errors to the store's domain errors.
func interpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
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
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.checkpointTail(ctx)
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.pokeCheckpointer()
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

// --- hosts ---

const hostColumns = `id, name, status, generation, credential_hash, claim_code_hash, claim_expires_at,
	claimed_at, agent_version, last_heartbeat_at, subscription, rate_limit_per_min, rate_limit_burst,
	created_at, deactivated_at`

func scanHost(row scanner) (*store.Host, error) {
	var h store.Host
	var sub sql.NullString
	err := row.Scan(&h.ID, &h.Name, &h.Status, &h.Generation, &h.CredentialHash, &h.ClaimCodeHash,
		nullTimeCol{&h.ClaimExpiresAt}, nullTimeCol{&h.ClaimedAt}, &h.AgentVersion, nullTimeCol{&h.LastHeartbeatAt},
		&sub, &h.RateLimitPerMin, &h.RateLimitBurst, timeCol{&h.CreatedAt}, nullTimeCol{&h.DeactivatedAt})
	if err != nil {
		return nil, err
	}
	if sub.Valid {
		h.Subscription = json.RawMessage(sub.String)
	}
	return &h, nil
}

func (s *Store) HostCreate(ctx context.Context, p *store.HostCreateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		INSERT INTO hosts (id, name, claim_code_hash, claim_expires_at, rate_limit_per_min, rate_limit_burst, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		RETURNING `+hostColumns,
		p.ID, p.Name, p.ClaimCodeHash, dbTime(p.ClaimExpiresAt), p.RateLimitPerMin, p.RateLimitBurst, dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("host create: %w", interpretError(err))
	}
	s.changed.notify(p.ID)
	return h, nil
}

func (s *Store) HostGet(ctx context.Context, id string) (*store.Host, error) {
	h, err := scanHost(s.read.QueryRowContext(ctx, `SELECT `+hostColumns+` FROM hosts WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("host get: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostList(ctx context.Context) ([]*store.Host, error) {
	hosts, err := queryAll(ctx, s.read, scanHost, `SELECT `+hostColumns+` FROM hosts ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	return hosts, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, q queryer, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
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
	return out, rows.Err()
}

func (s *Store) HostClaim(ctx context.Context, p *store.HostClaimParams) (*store.Host, error) {
	now := dbTime(p.Now)
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET credential_hash = ?, agent_version = ?, claimed_at = ?,
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE claim_code_hash = ? AND status = 'active' AND claim_expires_at > ?
		RETURNING `+hostColumns,
		p.CredentialHash, p.AgentVersion, now, p.ClaimCodeHash, now))
	if err != nil {
		return nil, fmt.Errorf("host claim: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostSetClaimCode(ctx context.Context, p *store.HostSetClaimCodeParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts SET claim_code_hash = ?, claim_expires_at = ?
		WHERE id = ? AND status = 'active'
		RETURNING `+hostColumns,
		p.ClaimCodeHash, dbTime(p.ClaimExpiresAt), p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host set claim code: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostHeartbeat(ctx context.Context, p *store.HostHeartbeatParams) error {
	var sub any // nil keeps the stored subscription
	if p.Subscription != nil {
		sub = string(p.Subscription)
	}
	res, err := s.write.ExecContext(ctx, `
		UPDATE hosts SET last_heartbeat_at = ?, agent_version = ?, subscription = COALESCE(?, subscription)
		WHERE id = ?`,
		dbTime(p.Now), p.AgentVersion, sub, p.HostID)
	if err != nil {
		return fmt.Errorf("host heartbeat: %w", interpretError(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("host heartbeat: %w", err)
	} else if n == 0 {
		return fmt.Errorf("host heartbeat: %w", store.ErrNotFound)
	}
	if p.Subscription != nil {
		s.changed.notify(p.HostID)
	}
	return nil
}

func (s *Store) HostDeactivate(ctx context.Context, p *store.HostDeactivateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET status = 'deactivated', deactivated_at = COALESCE(deactivated_at, ?),
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE id = ?
		RETURNING `+hostColumns,
		dbTime(p.Now), p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host deactivate: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return h, nil
}

// --- sources ---

const sourceColumns = `host_id, name, provider, enabled, events, secrets, options, max_body_bytes,
	retry_delays_ms, max_attempts, created_at, updated_at, allowed_ips`

func scanSource(row scanner) (*store.Source, error) {
	var src store.Source
	var events, secrets, options, allowed string
	var delays *string
	err := row.Scan(&src.HostID, &src.Name, &src.Provider, &src.Enabled, &events, &secrets, &options,
		&src.MaxBodyBytes, &delays, &src.MaxAttempts, timeCol{&src.CreatedAt}, timeCol{&src.UpdatedAt}, &allowed)
	if err != nil {
		return nil, err
	}
	if src.RetryDelays, err = store.DecodeDelays(delays); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &src.Events); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if err := json.Unmarshal([]byte(secrets), &src.Secrets); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := json.Unmarshal([]byte(options), &src.Options); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	if err := json.Unmarshal([]byte(allowed), &src.AllowedIPs); err != nil {
		return nil, fmt.Errorf("allowed_ips: %w", err)
	}
	if len(src.AllowedIPs) == 0 {
		src.AllowedIPs = nil
	}
	return &src, nil
}

func (s *Store) SourceUpsert(ctx context.Context, p *store.SourceUpsertParams) (*store.Source, error) {
	events, secrets, options, err := p.JSONFields()
	if err != nil {
		return nil, fmt.Errorf("source upsert: %w", err)
	}
	now := dbTime(p.Now)
	src, err := scanSource(s.write.QueryRowContext(ctx, `
		INSERT INTO sources (host_id, name, provider, enabled, events, secrets, options, max_body_bytes,
			retry_delays_ms, max_attempts, created_at, updated_at, allowed_ips)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (host_id, name) DO UPDATE
		SET provider = excluded.provider, enabled = excluded.enabled, events = excluded.events,
			secrets = excluded.secrets, options = excluded.options,
			max_body_bytes = excluded.max_body_bytes, retry_delays_ms = excluded.retry_delays_ms,
			max_attempts = excluded.max_attempts, updated_at = excluded.updated_at,
			allowed_ips = excluded.allowed_ips
		RETURNING `+sourceColumns,
		p.HostID, p.Name, p.Provider, p.Enabled, string(events), string(secrets), string(options),
		p.MaxBodyBytes, store.EncodeDelays(p.RetryDelays), max(p.MaxAttempts, 0), now, now, p.AllowedIPsJSON()))
	if err != nil {
		return nil, fmt.Errorf("source upsert: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return src, nil
}

func (s *Store) SourceGet(ctx context.Context, hostID, name string) (*store.Source, error) {
	src, err := scanSource(s.read.QueryRowContext(ctx,
		`SELECT `+sourceColumns+` FROM sources WHERE host_id = ? AND name = ?`, hostID, name))
	if err != nil {
		return nil, fmt.Errorf("source get: %w", interpretError(err))
	}
	return src, nil
}

func (s *Store) SourceList(ctx context.Context, hostID string) ([]*store.Source, error) {
	sources, err := queryAll(ctx, s.read, scanSource,
		`SELECT `+sourceColumns+` FROM sources WHERE host_id = ? ORDER BY name`, hostID)
	if err != nil {
		return nil, fmt.Errorf("source list: %w", err)
	}
	return sources, nil
}

// zeroCounts is a count per status, all zero.
func zeroCounts() map[store.Status]int {
	counts := make(map[store.Status]int, len(store.Statuses))
	for _, st := range store.Statuses {
		counts[st] = 0
	}
	return counts
}

func (s *Store) HostListWithCounts(ctx context.Context) ([]*store.HostWithCounts, error) {
	rows, err := s.read.QueryContext(ctx, `
		SELECT `+prefixed("h.", hostColumns)+`, c.status, c.n
		FROM hosts h
		LEFT JOIN (SELECT host_id, status, count(*) AS n FROM deliveries GROUP BY host_id, status) c
			ON c.host_id = h.id
		ORDER BY h.created_at, h.id`)
	if err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	defer rows.Close()
	var out []*store.HostWithCounts
	for rows.Next() {
		var status sql.NullString
		var n sql.NullInt64
		h, err := scanHost(hostAndCount{rows, &status, &n})
		if err != nil {
			return nil, fmt.Errorf("host list with counts: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Host.ID != h.ID {
			out = append(out, &store.HostWithCounts{Host: h, Counts: zeroCounts()})
		}
		if status.Valid {
			out[len(out)-1].Counts[store.Status(status.String)] = int(n.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	return out, nil
}

// hostAndCount scans a host's columns followed by a status and a count.
type hostAndCount struct {
	row    scanner
	status *sql.NullString
	n      *sql.NullInt64
}

func (r hostAndCount) Scan(dest ...any) error {
	return r.row.Scan(append(dest, r.status, r.n)...)
}

// prefixed qualifies each of a comma-separated column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func (s *Store) HostUpdate(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET name = COALESCE(?, name), rate_limit_per_min = COALESCE(?, rate_limit_per_min),
			rate_limit_burst = COALESCE(?, rate_limit_burst)
		WHERE id = ?
		RETURNING `+hostColumns,
		p.Name, p.RateLimitPerMin, p.RateLimitBurst, p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host update: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return h, nil
}

func (s *Store) HostExpireClaimCodes(ctx context.Context, p *store.HostExpireClaimCodesParams) (int, error) {
	res, err := s.write.ExecContext(ctx, `
		UPDATE hosts SET claim_code_hash = NULL, claim_expires_at = NULL
		WHERE id IN (
			SELECT id FROM hosts
			WHERE claim_code_hash IS NOT NULL AND claim_expires_at <= ?
			ORDER BY claim_expires_at
			LIMIT ?)`,
		dbTime(p.Now), store.LimitOr(p.Limit, defaultBatch))
	if err != nil {
		return 0, fmt.Errorf("host expire claim codes: %w", interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("host expire claim codes: %w", err)
	}
	return int(n), nil
}

// listeners are the callbacks of running DeliveryListen calls.
type listeners struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(hostID string)
}

func newListeners() listeners { return listeners{fns: map[int]func(string){}} }

func (l *listeners) add(fn func(string)) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	l.fns[id] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fns, id)
	}
}

func (l *listeners) notify(hostID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, fn := range l.fns {
		fn(hostID)
	}
}

func (s *Store) DeliveryListen(ctx context.Context, p *store.DeliveryListenParams) error {
	remove := s.wake.add(p.Available)
	defer remove()
	if p.Changed != nil {
		removeChanged := s.changed.add(p.Changed)
		defer removeChanged()
	}
	if p.Socket != nil {
		removeSocket := s.sockets.listen(p.Socket)
		defer removeSocket()
	}
	if p.Stopping != nil {
		removeStopping := s.stopping.add(p.Stopping)
		defer removeStopping()
	}
	if p.IPSetChanged != nil {
		removeIPSets := s.ipsets.add(p.IPSetChanged)
		defer removeIPSets()
	}
	if p.Listening != nil {
		p.Listening()
	}
	<-ctx.Done()
	return nil
}

func (s *Store) HostStopping(ctx context.Context, hostID string) error {
	s.stopping.notify(hostID)
	return nil
}
