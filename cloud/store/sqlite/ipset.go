package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

const ipSetColumns = `name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error`

func scanIPSet(row scanner) (*store.IPSet, error) {
	var set store.IPSet
	var prefixes string
	var taken, refreshed *time.Time
	err := row.Scan(&set.Name, &prefixes, &set.Origin, nullTimeCol{&taken}, nullTimeCol{&refreshed},
		timeCol{&set.CheckedAt}, &set.LastError)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(prefixes), &set.Prefixes); err != nil {
		return nil, fmt.Errorf("prefixes: %w", err)
	}
	if len(set.Prefixes) == 0 {
		set.Prefixes = nil
	}
	if taken != nil {
		set.TakenAt = *taken
	}
	if refreshed != nil {
		set.RefreshedAt = *refreshed
	}
	return &set, nil
}

func (s *Store) IPSetGet(ctx context.Context, name string) (*store.IPSet, error) {
	set, err := scanIPSet(s.read.QueryRowContext(ctx, `SELECT `+ipSetColumns+` FROM ip_sets WHERE name = ?`, name))
	if err != nil {
		return nil, fmt.Errorf("ip set get: %w", interpretError(err))
	}
	return set, nil
}

func (s *Store) IPSetList(ctx context.Context) ([]*store.IPSet, error) {
	sets, err := queryAll(ctx, s.read, scanIPSet, `SELECT `+ipSetColumns+` FROM ip_sets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("ip set list: %w", err)
	}
	return sets, nil
}

func (s *Store) IPSetPut(ctx context.Context, p *store.IPSetPutParams) (*store.IPSet, error) {
	prefixes, err := json.Marshal(nonNil(p.Prefixes))
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", err)
	}
	now := dbTime(p.Now)
	set, err := scanIPSet(s.write.QueryRowContext(ctx, `
		INSERT INTO ip_sets (name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error)
		VALUES (?, ?, ?, ?, ?, ?, '')
		ON CONFLICT (name) DO UPDATE
		SET prefixes = excluded.prefixes, origin = excluded.origin, taken_at = excluded.taken_at,
			refreshed_at = excluded.refreshed_at, checked_at = excluded.checked_at, last_error = ''
		RETURNING `+ipSetColumns,
		p.Name, string(prefixes), p.Origin, dbTime(p.TakenAt), now, now))
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", interpretError(err))
	}
	s.ipsets.notify(p.Name)
	return set, nil
}

func (s *Store) IPSetFailed(ctx context.Context, p *store.IPSetFailedParams) (*store.IPSet, error) {
	set, err := scanIPSet(s.write.QueryRowContext(ctx, `
		INSERT INTO ip_sets (name, origin, checked_at, last_error)
		VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE
		SET checked_at = excluded.checked_at, last_error = excluded.last_error
		RETURNING `+ipSetColumns,
		p.Name, p.Origin, dbTime(p.Now), p.BoundedError()))
	if err != nil {
		return nil, fmt.Errorf("ip set failed: %w", interpretError(err))
	}
	return set, nil
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}
