package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The rest of store.EdgeStore is flow.Edge, which Store embeds: these
// are the quarantine's inserts, bounded in each engine's own SQL, and the
// source secrets, whose changes each engine announces its own way.
var _ store.EdgeStore = (*Store)(nil)

// --- quarantine ---

func (s *Store) QuarantineInsert(ctx context.Context, p *store.QuarantineInsertParams) (*store.QuarantinedRequest, error) {
	headers, err := json.Marshal(p.Header)
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", err)
	}
	macs := p.TokenMACs
	if macs == nil {
		macs = map[string][]byte{}
	}
	macsJSON, err := json.Marshal(macs)
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", err)
	}
	size := store.QuarantineSize(p.Body, headers, p.URL)
	bound := func(n int64) int64 {
		if n <= 0 {
			return 1<<63 - 1
		}
		return n
	}
	// The bounds are checked in the insert itself: concurrent inserts may
	// overshoot them by at most their number.
	q, err := cols.ScanQuarantined(s.pool.QueryRow(ctx, `
		INSERT INTO quarantine (host_id, source, url, headers, token_macs, body, client_ip, received_at, size, kind, reason)
		SELECT $1::text, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, $9::bigint, $14, $15
		FROM (SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes,
		             count(*) FILTER (WHERE host_id = $1) AS host_n,
		             coalesce(sum(size) FILTER (WHERE host_id = $1), 0) AS host_bytes
		      FROM quarantine) held
		WHERE held.n < $10 AND held.bytes + $9 <= $11 AND held.host_n < $12 AND held.host_bytes + $9 <= $13
		RETURNING `+flow.QuarantineColumns,
		p.HostID, p.Source, p.URL, string(headers), string(macsJSON), store.OrEmpty(p.Body), p.ClientIP, ms(p.ReceivedAt), size,
		bound(int64(p.MaxRows)), bound(p.MaxBytes), bound(int64(p.HostMaxRows)), bound(p.HostMaxBytes),
		store.KindOr(p.Kind), p.Reason))
	if err != nil {
		err = interpretError(err)
		if err == store.ErrNotFound {
			err = s.quarantineFull(ctx, p, size)
		}
		return nil, fmt.Errorf("quarantine insert: %w", err)
	}
	return q, nil
}

// quarantineFull says which bound refused an insert: the host's share, or
// the quarantine's (also when another insert's delete made room since).
func (s *Store) quarantineFull(ctx context.Context, p *store.QuarantineInsertParams, size int64) error {
	var held store.QuarantineHeld
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*), coalesce(sum(size), 0),
		       count(*) FILTER (WHERE host_id = $1), coalesce(sum(size) FILTER (WHERE host_id = $1), 0)
		FROM quarantine`, p.HostID).Scan(&held.Rows, &held.Bytes, &held.HostRows, &held.HostBytes); err != nil {
		return err
	}
	if err := p.Room(held, size); err != nil {
		return err
	}
	return store.ErrQuarantineFull
}

// --- source secrets ---

func (s *Store) SourceSetSecrets(ctx context.Context, p *store.SourceSetSecretsParams) error {
	secrets, err := json.Marshal(store.OrEmpty(p.Secrets))
	if err != nil {
		return fmt.Errorf("source set secrets: %w", err)
	}
	return s.changing(ctx, p.HostID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE sources SET secrets = $1, updated_at = $2 WHERE host_id = $3 AND name = $4 AND updated_at = $5`,
			string(secrets), ms(p.Now), p.HostID, p.Name, p.UpdatedAt)
		if err != nil {
			return fmt.Errorf("source set secrets: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM sources WHERE host_id = $1 AND name = $2`, p.HostID, p.Name).Scan(&one); err != nil {
			return fmt.Errorf("source set secrets: %w", interpretError(err))
		}
		return fmt.Errorf("source set secrets: %w: source changed meanwhile", store.ErrConflict)
	})
}
