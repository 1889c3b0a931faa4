package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.EdgeStore = (*Store)(nil)

// --- rejections ---

func (s *Store) RejectionInsert(ctx context.Context, rej *store.Rejection) error {
	r := rej.Bounded()
	names, err := json.Marshal(store.OrEmpty(r.HeaderNames))
	if err != nil {
		return fmt.Errorf("rejection insert: %w", err)
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO rejections (host_id, source, at, status, reason, client_ip, header_names)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		r.HostID, r.Source, ms(r.At), r.Status, r.Reason, r.ClientIP, string(names))
	if err != nil {
		return fmt.Errorf("rejection insert: %w", interpretError(err))
	}
	return nil
}

func scanRejection(row pgx.Row) (*store.Rejection, error) {
	var r store.Rejection
	var names []byte
	if err := row.Scan(&r.ID, &r.HostID, &r.Source, &r.At, &r.Status, &r.Reason, &r.ClientIP, &names); err != nil {
		return nil, err
	}
	r.At = r.At.UTC()
	if err := json.Unmarshal(names, &r.HeaderNames); err != nil {
		return nil, fmt.Errorf("header names: %w", err)
	}
	return &r, nil
}

func (s *Store) RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, host_id, source, at, status, reason, client_ip, header_names
		FROM rejections WHERE host_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`,
		p.HostID, before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("rejection list: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Rejection, error) { return scanRejection(r) })
	if err != nil {
		return nil, fmt.Errorf("rejection list: %w", err)
	}
	return rs, nil
}

func (s *Store) RejectionPrune(ctx context.Context, p *store.PruneParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM rejections WHERE id IN (SELECT id FROM rejections WHERE at < $1 ORDER BY at LIMIT $2)`,
		ms(p.Before), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return 0, fmt.Errorf("rejection prune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// --- quarantine ---

const quarantineColumns = `id, host_id, source, url, headers, token_macs, body, client_ip, received_at, kind, reason`

func scanQuarantined(row pgx.Row) (*store.QuarantinedRequest, error) {
	var q store.QuarantinedRequest
	var headers, macs []byte
	if err := row.Scan(&q.ID, &q.HostID, &q.Source, &q.URL, &headers, &macs, &q.Body, &q.ClientIP, &q.ReceivedAt, &q.Kind, &q.Reason); err != nil {
		return nil, err
	}
	q.ReceivedAt = q.ReceivedAt.UTC()
	if err := json.Unmarshal(headers, &q.Header); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if err := json.Unmarshal(macs, &q.TokenMACs); err != nil {
		return nil, fmt.Errorf("token macs: %w", err)
	}
	return &q, nil
}

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
	q, err := scanQuarantined(s.pool.QueryRow(ctx, `
		INSERT INTO quarantine (host_id, source, url, headers, token_macs, body, client_ip, received_at, size, kind, reason)
		SELECT $1::text, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, $9::bigint, $14, $15
		FROM (SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes,
		             count(*) FILTER (WHERE host_id = $1) AS host_n,
		             coalesce(sum(size) FILTER (WHERE host_id = $1), 0) AS host_bytes
		      FROM quarantine) held
		WHERE held.n < $10 AND held.bytes + $9 <= $11 AND held.host_n < $12 AND held.host_bytes + $9 <= $13
		RETURNING `+quarantineColumns,
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

func (s *Store) QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+quarantineColumns+` FROM quarantine WHERE id > $1 AND ($3 = '' OR kind = $3)
		ORDER BY id LIMIT $2`,
		p.AfterID, store.LimitOr(p.Limit, 100), p.Kind)
	if err != nil {
		return nil, fmt.Errorf("quarantine list: %w", err)
	}
	qs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.QuarantinedRequest, error) { return scanQuarantined(r) })
	if err != nil {
		return nil, fmt.Errorf("quarantine list: %w", err)
	}
	return qs, nil
}

func (s *Store) QuarantineGet(ctx context.Context, id int64) (*store.QuarantinedRequest, error) {
	q, err := scanQuarantined(s.pool.QueryRow(ctx, `SELECT `+quarantineColumns+` FROM quarantine WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("quarantine get: %w", interpretError(err))
	}
	return q, nil
}

func (s *Store) QuarantineDelete(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM quarantine WHERE id = $1`, id); err != nil {
		return fmt.Errorf("quarantine delete: %w", err)
	}
	return nil
}

func (s *Store) QuarantineCount(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&n); err != nil {
		return 0, fmt.Errorf("quarantine count: %w", err)
	}
	return n, nil
}

// --- meta ---

func (s *Store) MetaGet(ctx context.Context, key string) (string, error) {
	var v string
	if err := s.pool.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, key).Scan(&v); err != nil {
		return "", fmt.Errorf("meta get %s: %w", key, interpretError(err))
	}
	return v, nil
}

func (s *Store) MetaPut(ctx context.Context, key, value string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("meta put %s: %w", key, err)
	}
	return nil
}

// --- source secrets ---

func (s *Store) SourceListAll(ctx context.Context) ([]*store.Source, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sourceColumns+` FROM sources ORDER BY host_id, name`)
	if err != nil {
		return nil, fmt.Errorf("source list all: %w", err)
	}
	sources, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Source, error) { return scanSource(r) })
	if err != nil {
		return nil, fmt.Errorf("source list all: %w", err)
	}
	return sources, nil
}

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
