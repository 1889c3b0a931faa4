package flow

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// Sources implements, on DB, the reads of store's sources, whose SQL both
// engines share (SourceGet, SourceList, SourceListAll). The writes are the
// engines' (around UpsertSource): each announces a changed host its own
// way.
type Sources struct{ DB DB }

// SourceColumns are the columns ScanSource reads, in its order.
const SourceColumns = `host_id, name, provider, enabled, events, secrets, options, max_body_bytes,
	retry_delays_ms, max_attempts, created_at, updated_at, allowed_ips, mode`

func (c Sources) SourceGet(ctx context.Context, hostID, name string) (*store.Source, error) {
	src, err := c.DB.Times().ScanSource(c.DB.Read().QueryRow(ctx,
		`SELECT `+SourceColumns+` FROM sources WHERE host_id = $1 AND name = $2`, hostID, name))
	if err != nil {
		return nil, fmt.Errorf("source get: %w", notFound(err))
	}
	return src, nil
}

func (c Sources) SourceList(ctx context.Context, hostID string) ([]*store.Source, error) {
	sources, err := All(ctx, c.DB.Read(), c.DB.Times().ScanSource,
		`SELECT `+SourceColumns+` FROM sources WHERE host_id = $1 ORDER BY name`, hostID)
	if err != nil {
		return nil, fmt.Errorf("source list: %w", err)
	}
	return sources, nil
}

func (c Sources) SourceListAll(ctx context.Context) ([]*store.Source, error) {
	sources, err := All(ctx, c.DB.Read(), c.DB.Times().ScanSource, `SELECT `+SourceColumns+` FROM sources ORDER BY host_id, name`)
	if err != nil {
		return nil, fmt.Errorf("source list all: %w", err)
	}
	return sources, nil
}

// UpsertSource creates or replaces a source on q (store.SourceUpsert, but
// for the announcement of the change, which is the engine's).
func UpsertSource(ctx context.Context, d Dialect, q Executor, p *store.SourceUpsertParams) (*store.Source, error) {
	events, secrets, options, err := p.JSONFields()
	if err != nil {
		return nil, err
	}
	// The owner is a host or a group (their ids never collide, and
	// neither is ever deleted): a source of neither is not stored.
	var one int
	if err := q.QueryRow(ctx, `SELECT 1 FROM hosts WHERE id = $1 UNION ALL SELECT 1 FROM host_groups WHERE id = $1`,
		p.HostID).Scan(&one); err != nil {
		return nil, notFound(err)
	}
	src, err := d.Times().ScanSource(q.QueryRow(ctx, `
		INSERT INTO sources (host_id, name, provider, enabled, events, secrets, options, max_body_bytes,
			retry_delays_ms, max_attempts, created_at, updated_at, allowed_ips, mode)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13)
		ON CONFLICT (host_id, name) DO UPDATE
		SET provider = excluded.provider, enabled = excluded.enabled, events = excluded.events,
			secrets = excluded.secrets, options = excluded.options,
			max_body_bytes = excluded.max_body_bytes, retry_delays_ms = excluded.retry_delays_ms,
			max_attempts = excluded.max_attempts, updated_at = excluded.updated_at,
			allowed_ips = excluded.allowed_ips, mode = excluded.mode
		RETURNING `+SourceColumns,
		p.HostID, p.Name, p.Provider, p.Enabled, string(events), string(secrets), string(options),
		p.MaxBodyBytes, store.EncodeDelays(p.RetryDelays), max(p.MaxAttempts, 0), d.Time(p.Now), p.AllowedIPsJSON(), string(p.Mode)))
	return src, notFound(err)
}

// ScanSource reads SourceColumns.
func (c TimeColumns) ScanSource(row Scanner) (*store.Source, error) {
	var src store.Source
	var events, secrets, options, delays, allowed []byte
	err := row.Scan(&src.HostID, &src.Name, &src.Provider, &src.Enabled, &events, &secrets, &options,
		&src.MaxBodyBytes, &delays, &src.MaxAttempts, c.Time(&src.CreatedAt), c.Time(&src.UpdatedAt), &allowed, &src.Mode)
	if err != nil {
		return nil, err
	}
	if delays != nil { // NULL: no schedule of its own
		stored := string(delays)
		if src.RetryDelays, err = store.DecodeDelays(&stored); err != nil {
			return nil, err
		}
	}
	if err := src.SetJSONFields(events, secrets, options, allowed); err != nil {
		return nil, err
	}
	return &src, nil
}
