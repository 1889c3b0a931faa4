package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.IPSetStore = (*Store)(nil)

// ipSetChannel is the LISTEN/NOTIFY channel on which a set's name says
// that the set was stored anew (store.DeliveryListenParams.IPSetChanged).
const ipSetChannel = "relay_ip_set_changed"

const ipSetColumns = `name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error`

func scanIPSet(row pgx.Row) (*store.IPSet, error) {
	var set store.IPSet
	var prefixes []byte
	var taken, refreshed *time.Time
	err := row.Scan(&set.Name, &prefixes, &set.Origin, &taken, &refreshed, &set.CheckedAt, &set.LastError)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(prefixes, &set.Prefixes); err != nil {
		return nil, fmt.Errorf("prefixes: %w", err)
	}
	if len(set.Prefixes) == 0 {
		set.Prefixes = nil
	}
	if taken != nil {
		set.TakenAt = taken.UTC()
	}
	if refreshed != nil {
		set.RefreshedAt = refreshed.UTC()
	}
	set.CheckedAt = set.CheckedAt.UTC()
	return &set, nil
}

func (s *Store) IPSetGet(ctx context.Context, name string) (*store.IPSet, error) {
	set, err := scanIPSet(s.pool.QueryRow(ctx, `SELECT `+ipSetColumns+` FROM ip_sets WHERE name = $1`, name))
	if err != nil {
		return nil, fmt.Errorf("ip set get: %w", interpretError(err))
	}
	return set, nil
}

func (s *Store) IPSetList(ctx context.Context) ([]*store.IPSet, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+ipSetColumns+` FROM ip_sets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("ip set list: %w", err)
	}
	sets, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.IPSet, error) { return scanIPSet(r) })
	if err != nil {
		return nil, fmt.Errorf("ip set list: %w", err)
	}
	return sets, nil
}

func (s *Store) IPSetPut(ctx context.Context, p *store.IPSetPutParams) (*store.IPSet, error) {
	prefixes := p.Prefixes
	if prefixes == nil {
		prefixes = []string{}
	}
	js, err := json.Marshal(prefixes)
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", err)
	}
	var set *store.IPSet
	err = s.inTx(ctx, func(tx pgx.Tx) (err error) {
		set, err = scanIPSet(tx.QueryRow(ctx, `
			INSERT INTO ip_sets (name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error)
			VALUES ($1, $2, $3, $4, $5, $5, '')
			ON CONFLICT (name) DO UPDATE
			SET prefixes = excluded.prefixes, origin = excluded.origin, taken_at = excluded.taken_at,
				refreshed_at = excluded.refreshed_at, checked_at = excluded.checked_at, last_error = ''
			RETURNING `+ipSetColumns,
			p.Name, string(js), p.Origin, ms(p.TakenAt), ms(p.Now)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ipSetChannel, p.Name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", interpretError(err))
	}
	return set, nil
}

func (s *Store) IPSetFailed(ctx context.Context, p *store.IPSetFailedParams) (*store.IPSet, error) {
	set, err := scanIPSet(s.pool.QueryRow(ctx, `
		INSERT INTO ip_sets (name, origin, checked_at, last_error)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE
		SET checked_at = excluded.checked_at, last_error = excluded.last_error
		RETURNING `+ipSetColumns,
		p.Name, p.Origin, ms(p.Now), p.BoundedError()))
	if err != nil {
		return nil, fmt.Errorf("ip set failed: %w", interpretError(err))
	}
	return set, nil
}
