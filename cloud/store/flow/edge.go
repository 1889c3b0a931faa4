package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// Edge implements, on DB, the methods of store.EdgeStore whose SQL both
// engines share: the rejections audit, the quarantine's reads and deletes,
// and the meta settings. An engine embeds it in its Store and writes the
// rest itself (QuarantineInsert, whose bounds each engine checks its own
// way, and the source secrets, whose changes each engine announces).
type Edge struct{ DB DB }

func (e Edge) RejectionInsert(ctx context.Context, rej *store.Rejection) error {
	r := rej.Bounded()
	names, err := json.Marshal(store.OrEmpty(r.HeaderNames))
	if err != nil {
		return fmt.Errorf("rejection insert: %w", err)
	}
	_, err = e.DB.Write().Exec(ctx, `
		INSERT INTO rejections (host_id, source, at, status, reason, client_ip, header_names)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		r.HostID, r.Source, e.DB.Time(r.At), r.Status, r.Reason, r.ClientIP, string(names))
	if err != nil {
		return fmt.Errorf("rejection insert: %w", err)
	}
	return nil
}

func (e Edge) RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rs, err := All(ctx, e.DB.Read(), e.DB.Times().ScanRejection, `
		SELECT id, host_id, source, at, status, reason, client_ip, header_names
		FROM rejections WHERE host_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`,
		p.HostID, before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("rejection list: %w", err)
	}
	return rs, nil
}

func (e Edge) RejectionPrune(ctx context.Context, p *store.PruneParams) (int, error) {
	n, err := e.DB.Write().Exec(ctx, `
		DELETE FROM rejections WHERE id IN (SELECT id FROM rejections WHERE at < $1 ORDER BY at LIMIT $2)`,
		e.DB.Time(p.Before), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return 0, fmt.Errorf("rejection prune: %w", err)
	}
	return int(n), nil
}

// QuarantineColumns are the columns ScanQuarantined reads, in its order.
const QuarantineColumns = `id, host_id, source, url, headers, token_macs, body, client_ip, received_at, kind, reason`

func (e Edge) QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error) {
	qs, err := All(ctx, e.DB.Read(), e.DB.Times().ScanQuarantined,
		`SELECT `+QuarantineColumns+` FROM quarantine WHERE id > $1 AND ($2 = '' OR kind = $2) ORDER BY id LIMIT $3`,
		p.AfterID, p.Kind, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("quarantine list: %w", err)
	}
	return qs, nil
}

func (e Edge) QuarantineGet(ctx context.Context, id int64) (*store.QuarantinedRequest, error) {
	q, err := e.DB.Times().ScanQuarantined(e.DB.Read().QueryRow(ctx,
		`SELECT `+QuarantineColumns+` FROM quarantine WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("quarantine get: %w", notFound(err))
	}
	return q, nil
}

func (e Edge) QuarantineDelete(ctx context.Context, id int64) error {
	if _, err := e.DB.Write().Exec(ctx, `DELETE FROM quarantine WHERE id = $1`, id); err != nil {
		return fmt.Errorf("quarantine delete: %w", err)
	}
	return nil
}

func (e Edge) QuarantineCount(ctx context.Context) (int, error) {
	var n int
	if err := e.DB.Read().QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&n); err != nil {
		return 0, fmt.Errorf("quarantine count: %w", err)
	}
	return n, nil
}

func (e Edge) MetaGet(ctx context.Context, key string) (string, error) {
	var v string
	if err := e.DB.Read().QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, key).Scan(&v); err != nil {
		return "", fmt.Errorf("meta get %s: %w", key, notFound(err))
	}
	return v, nil
}

func (e Edge) MetaPut(ctx context.Context, key, value string) error {
	_, err := e.DB.Write().Exec(ctx, `
		INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("meta put %s: %w", key, err)
	}
	return nil
}

// ScanRejection reads id, host id, source, at, status, reason, client ip
// and header names (JSON).
func (c TimeColumns) ScanRejection(row Scanner) (*store.Rejection, error) {
	var r store.Rejection
	var names []byte
	if err := row.Scan(&r.ID, &r.HostID, &r.Source, c.Time(&r.At), &r.Status, &r.Reason, &r.ClientIP, &names); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(names, &r.HeaderNames); err != nil {
		return nil, fmt.Errorf("header names: %w", err)
	}
	return &r, nil
}

// ScanQuarantined reads QuarantineColumns.
func (c TimeColumns) ScanQuarantined(row Scanner) (*store.QuarantinedRequest, error) {
	var q store.QuarantinedRequest
	var headers, macs []byte
	if err := row.Scan(&q.ID, &q.HostID, &q.Source, &q.URL, &headers, &macs, &q.Body, &q.ClientIP, c.Time(&q.ReceivedAt), &q.Kind, &q.Reason); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(headers, &q.Header); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if err := json.Unmarshal(macs, &q.TokenMACs); err != nil {
		return nil, fmt.Errorf("token macs: %w", err)
	}
	return &q, nil
}

// notFound is err, or store.ErrNotFound when a row's Scan found none.
func notFound(err error) error {
	if errors.Is(err, ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}
