package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The rest of store.EdgeStore is flow.Edge, which Store embeds: these
// are the quarantine's inserts, bounded in each engine's own SQL, and the
// source secrets, whose changes each engine announces its own way.
var _ store.EdgeStore = (*Store)(nil)

// --- quarantine ---

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
	err = s.inTx(ctx, func(tx *txn) error {
		var held store.QuarantineHeld
		if err := tx.QueryRowContext(ctx, quarantineHeldQuery, p.HostID, p.HostID).Scan(
			&held.Rows, &held.Bytes, &held.HostRows, &held.HostBytes); err != nil {
			return err
		}
		if err := p.Room(held, size); err != nil {
			return err
		}
		var err error
		q, err = cols.ScanQuarantined(tx.QueryRowContext(ctx, `
			INSERT INTO quarantine (host_id, source, url, headers, token_macs, body, client_ip, received_at, size, kind, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+flow.QuarantineColumns,
			p.HostID, p.Source, p.URL, string(headers), string(macs), store.OrEmpty(p.Body), p.ClientIP, dbTime(p.ReceivedAt), size,
			store.KindOr(p.Kind), p.Reason))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("quarantine insert: %w", interpretError(err))
	}
	return q, nil
}

// orEmptyMap is m, or an empty map when m is nil (stored as {}, never null).
func orEmptyMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// --- source secrets ---

func (s *Store) SourceSetSecrets(ctx context.Context, p *store.SourceSetSecretsParams) error {
	secrets, err := json.Marshal(store.OrEmpty(p.Secrets))
	if err != nil {
		return fmt.Errorf("source set secrets: %w", err)
	}
	err = s.inTx(ctx, func(tx *txn) error {
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
