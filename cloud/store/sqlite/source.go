package sqlite

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

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
	if err := src.SetJSONFields([]byte(events), []byte(secrets), []byte(options), []byte(allowed)); err != nil {
		return nil, err
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
