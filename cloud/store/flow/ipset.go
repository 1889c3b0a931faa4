package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// IPSets implements, on DB, the methods of store.IPSetStore whose SQL both
// engines share. An engine embeds it in its Store and writes IPSetPut
// itself, around PutIPSet: each announces a stored set its own way.
type IPSets struct{ DB DB }

// IPSetColumns are the columns ScanIPSet reads, in its order.
const IPSetColumns = `name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error`

func (i IPSets) IPSetGet(ctx context.Context, name string) (*store.IPSet, error) {
	set, err := i.DB.Times().ScanIPSet(i.DB.Read().QueryRow(ctx, `SELECT `+IPSetColumns+` FROM ip_sets WHERE name = $1`, name))
	if err != nil {
		return nil, fmt.Errorf("ip set get: %w", notFound(err))
	}
	return set, nil
}

func (i IPSets) IPSetList(ctx context.Context) ([]*store.IPSet, error) {
	sets, err := All(ctx, i.DB.Read(), i.DB.Times().ScanIPSet, `SELECT `+IPSetColumns+` FROM ip_sets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("ip set list: %w", err)
	}
	return sets, nil
}

func (i IPSets) IPSetFailed(ctx context.Context, p *store.IPSetFailedParams) (*store.IPSet, error) {
	set, err := i.DB.Times().ScanIPSet(i.DB.Write().QueryRow(ctx, `
		INSERT INTO ip_sets (name, origin, checked_at, last_error)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE
		SET checked_at = excluded.checked_at, last_error = excluded.last_error
		RETURNING `+IPSetColumns,
		p.Name, p.Origin, i.DB.Time(p.Now), p.BoundedError()))
	if err != nil {
		return nil, fmt.Errorf("ip set failed: %w", notFound(err))
	}
	return set, nil
}

// PutIPSet stores a set anew on q (store.IPSetStore.IPSetPut, but for the
// announcement of it, which is the engine's).
func PutIPSet(ctx context.Context, d Dialect, q Executor, p *store.IPSetPutParams) (*store.IPSet, error) {
	prefixes := p.Prefixes
	if prefixes == nil {
		prefixes = []string{}
	}
	js, err := json.Marshal(prefixes)
	if err != nil {
		return nil, err
	}
	return d.Times().ScanIPSet(q.QueryRow(ctx, `
		INSERT INTO ip_sets (name, prefixes, origin, taken_at, refreshed_at, checked_at, last_error)
		VALUES ($1, $2, $3, $4, $5, $5, '')
		ON CONFLICT (name) DO UPDATE
		SET prefixes = excluded.prefixes, origin = excluded.origin, taken_at = excluded.taken_at,
			refreshed_at = excluded.refreshed_at, checked_at = excluded.checked_at, last_error = ''
		RETURNING `+IPSetColumns,
		p.Name, string(js), p.Origin, d.Time(p.TakenAt), d.Time(p.Now)))
}

// ScanIPSet reads IPSetColumns.
func (c TimeColumns) ScanIPSet(row Scanner) (*store.IPSet, error) {
	var set store.IPSet
	var prefixes []byte
	var taken, refreshed *time.Time
	err := row.Scan(&set.Name, &prefixes, &set.Origin, c.NullTime(&taken), c.NullTime(&refreshed), c.Time(&set.CheckedAt), &set.LastError)
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
		set.TakenAt = *taken
	}
	if refreshed != nil {
		set.RefreshedAt = *refreshed
	}
	return &set, nil
}
