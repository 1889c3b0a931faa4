// Package postgres is the cloud store on PostgreSQL (pgx/v5 and pgxpool).
// Several cloud replicas may share one database: claiming uses
// FOR UPDATE SKIP LOCKED, and migrations run under an advisory lock.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/migrations"
)

// Store implements store.Store on a pgx connection pool.
type Store struct {
	// Shared is what both engines share, written once in package flow over
	// the pool (flowDB).
	flow.Shared

	pool *pgxpool.Pool
	// listenPID is the backend pid of DeliveryListen's session while it
	// listens (0: none): the owner of the sockets this process opens.
	listenPID atomic.Uint32
}

var _ store.Store = (*Store)(nil)

// defaultMaxConns is the pool's size unless the URL sets pool_max_conns.
const defaultMaxConns = 16

// Open connects to the database at url (postgres://…) and checks that it
// answers. It does not migrate; call Migrate.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres open: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default (the larger of 4 and the CPU count) starves a small
		// machine: intake's group commit, heartbeats, long polls and the
		// sweeper each hold connections. pool_max_conns in the URL wins.
		cfg.MaxConns = max(cfg.MaxConns, defaultMaxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres open: %w", err)
	}
	return &Store{Shared: flow.NewShared(flowDB{pool}), pool: pool}, nil
}

// Migrate applies pending migrations under a Postgres advisory lock, so
// replicas starting together migrate once.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.MigrateReport(ctx)
	return err
}

func (s *Store) MigrateReport(ctx context.Context) (store.MigrateResult, error) {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	return flow.Migrate(ctx, goose.DialectPostgres, db, migrations.Postgres, goose.WithSessionLocker(locker))
}

func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// interpretError maps Postgres errors to the store's domain errors.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, flow.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", store.ErrConflict, pgErr.ConstraintName)
		case "23503": // foreign_key_violation: the referenced row is missing
			return fmt.Errorf("%w: %s", store.ErrNotFound, pgErr.ConstraintName)
		}
	}
	return err
}

// changedChannel is the LISTEN/NOTIFY channel on which a host's id says
// that the host or one of its sources changed.
const changedChannel = "relay_host_changed"

// changing runs fn in a transaction that, once committed, tells every
// listener that hostID's host or sources changed
// (store.DeliveryListenParams.Changed).
func (s *Store) changing(ctx context.Context, hostID string, fn func(tx pgx.Tx) error) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, changedChannel, hostID)
		return err
	})
}

// db is the pool as the shared flows use it.
func (s *Store) db() flowDB { return flowDB{s.pool} }

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// ms truncates t to the millisecond precision both engines keep, in UTC.
func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

func msPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := ms(*t)
	return &v
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

// --- hosts ---

const hostColumns = `id, name, status, generation, credential_hash, claim_code_hash, claim_expires_at,
	claimed_at, agent_version, last_heartbeat_at, subscription, rate_limit_per_min, rate_limit_burst,
	created_at, deactivated_at`

func scanHost(row flow.Scanner) (*store.Host, error) {
	var h store.Host
	var sub []byte
	err := row.Scan(&h.ID, &h.Name, &h.Status, &h.Generation, &h.CredentialHash, &h.ClaimCodeHash,
		&h.ClaimExpiresAt, &h.ClaimedAt, &h.AgentVersion, &h.LastHeartbeatAt, &sub,
		&h.RateLimitPerMin, &h.RateLimitBurst, &h.CreatedAt, &h.DeactivatedAt)
	if err != nil {
		return nil, err
	}
	if sub != nil {
		h.Subscription = json.RawMessage(sub)
	}
	h.ClaimExpiresAt = utcPtr(h.ClaimExpiresAt)
	h.ClaimedAt = utcPtr(h.ClaimedAt)
	h.LastHeartbeatAt = utcPtr(h.LastHeartbeatAt)
	h.CreatedAt = h.CreatedAt.UTC()
	h.DeactivatedAt = utcPtr(h.DeactivatedAt)
	return &h, nil
}

func (s *Store) HostCreate(ctx context.Context, p *store.HostCreateParams) (*store.Host, error) {
	var h *store.Host
	err := s.changing(ctx, p.ID, func(tx pgx.Tx) (err error) {
		h, err = scanHost(tx.QueryRow(ctx, `
		INSERT INTO hosts (id, name, claim_code_hash, claim_expires_at, rate_limit_per_min, rate_limit_burst, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING `+hostColumns,
			p.ID, p.Name, p.ClaimCodeHash, ms(p.ClaimExpiresAt), p.RateLimitPerMin, p.RateLimitBurst, ms(p.Now)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("host create: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostGet(ctx context.Context, id string) (*store.Host, error) {
	h, err := scanHost(s.pool.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("host get: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostList(ctx context.Context) ([]*store.Host, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hostColumns+` FROM hosts ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	hosts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Host, error) { return scanHost(r) })
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	return hosts, nil
}

func (s *Store) HostClaim(ctx context.Context, p *store.HostClaimParams) (*store.Host, error) {
	h, err := scanHost(s.pool.QueryRow(ctx, `
		UPDATE hosts
		SET credential_hash = $2, agent_version = $3, claimed_at = $4,
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE claim_code_hash = $1 AND status = 'active' AND claim_expires_at > $4
		RETURNING `+hostColumns,
		p.ClaimCodeHash, p.CredentialHash, p.AgentVersion, ms(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("host claim: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostSetClaimCode(ctx context.Context, p *store.HostSetClaimCodeParams) (*store.Host, error) {
	h, err := scanHost(s.pool.QueryRow(ctx, `
		UPDATE hosts SET claim_code_hash = $2, claim_expires_at = $3
		WHERE id = $1 AND status = 'active'
		RETURNING `+hostColumns,
		p.HostID, p.ClaimCodeHash, ms(p.ClaimExpiresAt)))
	if err != nil {
		return nil, fmt.Errorf("host set claim code: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostHeartbeat(ctx context.Context, p *store.HostHeartbeatParams) error {
	var sub *string // nil keeps the stored subscription
	if p.Subscription != nil {
		v := string(p.Subscription)
		sub = &v
	}
	const update = `
		UPDATE hosts
		SET last_heartbeat_at = $2, agent_version = $3, subscription = COALESCE($4::json, subscription)
		WHERE id = $1`
	var tag pgconn.CommandTag
	var err error
	if sub == nil {
		tag, err = s.pool.Exec(ctx, update, p.HostID, ms(p.Now), p.AgentVersion, sub)
	} else {
		// A new subscription changes what intake keeps: replicas are told.
		err = s.changing(ctx, p.HostID, func(tx pgx.Tx) (err error) {
			tag, err = tx.Exec(ctx, update, p.HostID, ms(p.Now), p.AgentVersion, sub)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("host heartbeat: %w", interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("host heartbeat: %w", store.ErrNotFound)
	}
	return nil
}

func (s *Store) HostDeactivate(ctx context.Context, p *store.HostDeactivateParams) (*store.Host, error) {
	var h *store.Host
	err := s.changing(ctx, p.HostID, func(tx pgx.Tx) (err error) {
		h, err = scanHost(tx.QueryRow(ctx, `
		UPDATE hosts
		SET status = 'deactivated', deactivated_at = COALESCE(deactivated_at, $2),
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE id = $1
		RETURNING `+hostColumns,
			p.HostID, ms(p.Now)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("host deactivate: %w", interpretError(err))
	}
	return h, nil
}

// --- sources ---

// SourceUpsert stores the source and notes the host changed in the same
// transaction. The rest of the sources' reads are flow.Sources, which Store
// embeds.
func (s *Store) SourceUpsert(ctx context.Context, p *store.SourceUpsertParams) (*store.Source, error) {
	var src *store.Source
	err := s.changing(ctx, p.HostID, func(tx pgx.Tx) (err error) {
		src, err = flow.UpsertSource(ctx, s.db(), executor{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("source upsert: %w", interpretError(err))
	}
	return src, nil
}

// decodeDelays reads a stored retry schedule (jsonb, NULL for none).
func decodeDelays(b []byte) ([]time.Duration, error) {
	if b == nil {
		return nil, nil
	}
	v := string(b)
	return store.DecodeDelays(&v)
}

func (s *Store) HostListWithCounts(ctx context.Context, p *store.HostPageParams) ([]*store.HostWithCounts, error) {
	return flow.HostsWithCounts(ctx, s.db(), hostColumns, scanHost, p)
}

func (s *Store) HostUpdate(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error) {
	var h *store.Host
	err := s.changing(ctx, p.HostID, func(tx pgx.Tx) (err error) {
		h, err = scanHost(tx.QueryRow(ctx, `
		UPDATE hosts
		SET name = COALESCE($2, name), rate_limit_per_min = COALESCE($3, rate_limit_per_min),
			rate_limit_burst = COALESCE($4, rate_limit_burst)
		WHERE id = $1
		RETURNING `+hostColumns,
			p.HostID, p.Name, p.RateLimitPerMin, p.RateLimitBurst))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("host update: %w", interpretError(err))
	}
	return h, nil
}
