package postgres

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// volumeQuery is a volume count's query in Postgres: rows are grouped by
// their UTC hour (date_trunc of a timestamp, integer arithmetic), and each
// hour's index is counted from Base once per hour.
func volumeQuery(r store.VolumeRange) (string, []any) {
	q, args := store.VolumeRangeQuery(r, store.VolumeSQL{
		Hour: func(col string) string { return "date_trunc('hour', " + col + " AT TIME ZONE 'UTC')" },
		Index: func(h string) string {
			return "(extract(epoch FROM " + h + " - (?::timestamptz AT TIME ZONE 'UTC')) / 3600)::int"
		},
		At:     func(t time.Time) any { return ms(t) },
		ByTime: "host_id = ?",
		Host:   "host_id",
	})
	return numbered(q), args
}

// VolumeQuery is volumeQuery (flow.Dialect).
func (flowDB) VolumeQuery(r store.VolumeRange) (string, []any) { return volumeQuery(r) }
