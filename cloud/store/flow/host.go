package flow

import (
	"context"
	"fmt"
	"strings"

	"github.com/relaykit/relay/cloud/store"
)

// HostsWithCounts is store.HostListWithCounts on db: a page of hosts,
// oldest first, with their deliveries counted by status, in one query that
// reads the counts the engine keeps (Dialect.DeliveryCounts) of the page's
// hosts only, not the deliveries. columns are the host columns scanHost
// reads, in its order.
func HostsWithCounts(ctx context.Context, db DB, columns string, scanHost func(Scanner) (*store.Host, error), p *store.HostPageParams) ([]*store.HostWithCounts, error) {
	q, args := HostCountsQuery(db, columns, p)
	rows, err := db.Read().Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	defer rows.Close()
	var out []*store.HostWithCounts
	for rows.Next() {
		n := make([]int64, len(store.Statuses))
		h, err := scanHost(hostAndCounts{rows, n})
		if err != nil {
			return nil, fmt.Errorf("host list with counts: %w", err)
		}
		counts := make(map[store.Status]int, len(store.Statuses))
		for i, st := range store.Statuses {
			counts[st] = int(n[i])
		}
		out = append(out, &store.HostWithCounts{Host: h, Counts: counts})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	return out, nil
}

// HostCountsQuery is HostsWithCounts' query and its arguments: a row a
// host of the page, its columns, then a count for each of store.Statuses in
// that order (0 for none). The page is taken first (hosts_created_idx),
// then the counts of its hosts, each host's turned into columns before the
// join: joined a row per status, each host's whole row was read and sent
// once per status it had.
func HostCountsQuery(d Dialect, columns string, p *store.HostPageParams) (string, []any) {
	var sums, cols []string
	for i, st := range store.Statuses {
		sums = append(sums, fmt.Sprintf("sum(CASE WHEN status = '%s' THEN n ELSE 0 END) AS n%d", st, i))
		cols = append(cols, fmt.Sprintf("CAST(coalesce(c.n%d, 0) AS bigint)", i))
	}
	var conds []string
	var args []any
	if p.AfterCreatedAt != nil {
		conds = append(conds, `(created_at, id) > ($1, $2)`)
		args = append(args, d.Time(*p.AfterCreatedAt), p.AfterID)
	}
	if p.Presence != "" {
		args = append(args, d.Time(p.LateCut), d.Time(p.OfflineCut), string(p.Presence))
		n := len(args)
		conds = append(conds, hasPresence(""), fmt.Sprintf("%s = $%d", presenceOf("", fmt.Sprintf("$%d", n-2), fmt.Sprintf("$%d", n-1)), n))
	}
	var where string
	if len(conds) > 0 {
		where = `WHERE ` + strings.Join(conds, ` AND `)
	}
	var limit string
	if p.Limit > 0 {
		args = append(args, p.Limit)
		limit = fmt.Sprintf("LIMIT $%d", len(args))
	}
	return `WITH h AS MATERIALIZED (SELECT ` + columns + ` FROM hosts ` + where + ` ORDER BY created_at, id ` + limit + `)
		SELECT ` + prefixed("h.", columns) + `, ` + strings.Join(cols, ", ") + `
		FROM h
		LEFT JOIN (SELECT host_id, ` + strings.Join(sums, ", ") + `
			FROM ` + d.DeliveryCounts("host_id IN (SELECT id FROM h)") + ` GROUP BY host_id) c ON c.host_id = h.id
		ORDER BY h.created_at, h.id`, args
}

// ZeroCounts is a count per status, all zero.
func ZeroCounts() map[store.Status]int {
	counts := make(map[store.Status]int, len(store.Statuses))
	for _, st := range store.Statuses {
		counts[st] = 0
	}
	return counts
}

// hostAndCounts scans a host's columns followed by its counts.
type hostAndCounts struct {
	row Scanner
	n   []int64
}

func (r hostAndCounts) Scan(dest ...any) error {
	for i := range r.n {
		dest = append(dest, &r.n[i])
	}
	return r.row.Scan(dest...)
}

// prefixed qualifies each of a comma-separated column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
