package flow

import (
	"context"
	"fmt"
	"strings"

	"github.com/relaykit/relay/cloud/store"
)

// HostsWithCounts is store.HostListWithCounts on db: every host, oldest
// first, with its deliveries counted by status, in one query that reads
// the counts the engine keeps (Dialect.DeliveryCounts), not the
// deliveries. columns are the host columns scanHost reads, in its order.
func HostsWithCounts(ctx context.Context, db DB, columns string, scanHost func(Scanner) (*store.Host, error)) ([]*store.HostWithCounts, error) {
	rows, err := db.Read().Query(ctx, HostCountsQuery(db, columns))
	if err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	defer rows.Close()
	var out []*store.HostWithCounts
	for rows.Next() {
		var status *string
		var n *int64
		h, err := scanHost(hostAndCount{rows, &status, &n})
		if err != nil {
			return nil, fmt.Errorf("host list with counts: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Host.ID != h.ID {
			out = append(out, &store.HostWithCounts{Host: h, Counts: ZeroCounts()})
		}
		if status != nil && n != nil {
			out[len(out)-1].Counts[store.Status(*status)] = int(*n)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host list with counts: %w", err)
	}
	return out, nil
}

// HostCountsQuery is HostsWithCounts' query: each host's columns, then a
// status and its count (NULL, NULL for a host without deliveries).
func HostCountsQuery(d Dialect, columns string) string {
	return `SELECT ` + prefixed("h.", columns) + `, c.status, CAST(c.n AS bigint)
		FROM hosts h
		LEFT JOIN ` + d.DeliveryCounts() + ` c ON c.host_id = h.id
		ORDER BY h.created_at, h.id`
}

// ZeroCounts is a count per status, all zero.
func ZeroCounts() map[store.Status]int {
	counts := make(map[store.Status]int, len(store.Statuses))
	for _, st := range store.Statuses {
		counts[st] = 0
	}
	return counts
}

// hostAndCount scans a host's columns followed by a status and a count.
type hostAndCount struct {
	row    Scanner
	status **string
	n      **int64
}

func (r hostAndCount) Scan(dest ...any) error {
	return r.row.Scan(append(dest, r.status, r.n)...)
}

// prefixed qualifies each of a comma-separated column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
