package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

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
	_, err = s.write.ExecContext(ctx, `
		INSERT INTO rejections (host_id, source, at, status, reason, client_ip, header_names)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		r.HostID, r.Source, dbTime(r.At), r.Status, r.Reason, r.ClientIP, string(names))
	if err != nil {
		return fmt.Errorf("rejection insert: %w", interpretError(err))
	}
	return nil
}

func scanRejection(row scanner) (*store.Rejection, error) {
	var r store.Rejection
	var names string
	if err := row.Scan(&r.ID, &r.HostID, &r.Source, timeCol{&r.At}, &r.Status, &r.Reason, &r.ClientIP, &names); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(names), &r.HeaderNames); err != nil {
		return nil, fmt.Errorf("header names: %w", err)
	}
	return &r, nil
}

func (s *Store) RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rs, err := queryAll(ctx, s.read, scanRejection, `
		SELECT id, host_id, source, at, status, reason, client_ip, header_names
		FROM rejections WHERE host_id = ? AND id < ? ORDER BY id DESC LIMIT ?`,
		p.HostID, before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("rejection list: %w", err)
	}
	return rs, nil
}

func (s *Store) RejectionPrune(ctx context.Context, p *store.PruneParams) (int, error) {
	res, err := s.write.ExecContext(ctx, `
		DELETE FROM rejections WHERE id IN (SELECT id FROM rejections WHERE at < ? ORDER BY at LIMIT ?)`,
		dbTime(p.Before), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return 0, fmt.Errorf("rejection prune: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// --- quarantine ---

const quarantineColumns = `id, host_id, source, url, headers, token_macs, body, client_ip, received_at, kind, reason`

func scanQuarantined(row scanner) (*store.QuarantinedRequest, error) {
	var q store.QuarantinedRequest
	var headers, macs string
	if err := row.Scan(&q.ID, &q.HostID, &q.Source, &q.URL, &headers, &macs, &q.Body, &q.ClientIP, timeCol{&q.ReceivedAt}, &q.Kind, &q.Reason); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(headers), &q.Header); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if err := json.Unmarshal([]byte(macs), &q.TokenMACs); err != nil {
		return nil, fmt.Errorf("token macs: %w", err)
	}
	return &q, nil
}

// quarantineHeldQuery is what the quarantine holds, in all and of one
// host: read from the index of hosts and sizes alone (migration 17), never
// the bodies.
const quarantineHeldQuery = `
	SELECT count(*), coalesce(sum(size), 0),
	       coalesce(sum(host_id = ?), 0), coalesce(sum(CASE WHEN host_id = ? THEN size END), 0)
	FROM quarantine`

func (s *Store) QuarantineInsert(ctx context.Context, p *store.QuarantineInsertParams) (*store.QuarantinedRequest, error) {
	headers, err := json.Marshal(p.Header)
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", err)
	}
	macs, err := json.Marshal(orEmptyMap(p.TokenMACs))
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", err)
	}
	size := store.QuarantineSize(p.Body, headers, p.URL)
	var q *store.QuarantinedRequest
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var held store.QuarantineHeld
		if err := tx.QueryRowContext(ctx, quarantineHeldQuery, p.HostID, p.HostID).Scan(
			&held.Rows, &held.Bytes, &held.HostRows, &held.HostBytes); err != nil {
			return err
		}
		if err := p.Room(held, size); err != nil {
			return err
		}
		var err error
		q, err = scanQuarantined(tx.QueryRowContext(ctx, `
			INSERT INTO quarantine (host_id, source, url, headers, token_macs, body, client_ip, received_at, size, kind, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+quarantineColumns,
			p.HostID, p.Source, p.URL, string(headers), string(macs), store.OrEmpty(p.Body), p.ClientIP, dbTime(p.ReceivedAt), size,
			store.KindOr(p.Kind), p.Reason))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", interpretError(err))
	}
	return q, nil
}

func (s *Store) QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error) {
	qs, err := queryAll(ctx, s.read, scanQuarantined,
		`SELECT `+quarantineColumns+` FROM quarantine WHERE id > ? AND (? = '' OR kind = ?) ORDER BY id LIMIT ?`,
		p.AfterID, p.Kind, p.Kind, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("quarantine list: %w", err)
	}
	return qs, nil
}

func (s *Store) QuarantineGet(ctx context.Context, id int64) (*store.QuarantinedRequest, error) {
	q, err := scanQuarantined(s.read.QueryRowContext(ctx, `SELECT `+quarantineColumns+` FROM quarantine WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("quarantine get: %w", interpretError(err))
	}
	return q, nil
}

func (s *Store) QuarantineDelete(ctx context.Context, id int64) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM quarantine WHERE id = ?`, id); err != nil {
		return fmt.Errorf("quarantine delete: %w", err)
	}
	return nil
}

func (s *Store) QuarantineCount(ctx context.Context) (int, error) {
	var n int
	if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM quarantine`).Scan(&n); err != nil {
		return 0, fmt.Errorf("quarantine count: %w", err)
	}
	return n, nil
}

// orEmptyMap is m, or an empty map when m is nil (stored as {}, never null).
func orEmptyMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// --- meta ---

func (s *Store) MetaGet(ctx context.Context, key string) (string, error) {
	var v string
	if err := s.read.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v); err != nil {
		return "", fmt.Errorf("meta get %s: %w", key, interpretError(err))
	}
	return v, nil
}

func (s *Store) MetaPut(ctx context.Context, key, value string) error {
	_, err := s.write.ExecContext(ctx, `
		INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("meta put %s: %w", key, err)
	}
	return nil
}

// --- source secrets ---

func (s *Store) SourceListAll(ctx context.Context) ([]*store.Source, error) {
	sources, err := queryAll(ctx, s.read, scanSource, `SELECT `+sourceColumns+` FROM sources ORDER BY host_id, name`)
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
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sources SET secrets = ?, updated_at = ? WHERE host_id = ? AND name = ? AND updated_at = ?`,
			string(secrets), dbTime(p.Now), p.HostID, p.Name, dbTime(p.UpdatedAt))
		if err != nil {
			return fmt.Errorf("source set secrets: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sources WHERE host_id = ? AND name = ?`, p.HostID, p.Name).Scan(&one); err != nil {
			return fmt.Errorf("source set secrets: %w", interpretError(err))
		}
		return fmt.Errorf("source set secrets: %w: source changed meanwhile", store.ErrConflict)
	})
	if err == nil {
		s.changed.notify(p.HostID)
	}
	return err
}
