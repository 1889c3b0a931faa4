package postgres

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// volumeQuery is DeliveryVolume's query in Postgres: rows are grouped by
// their UTC hour (date_trunc of a timestamp, integer arithmetic), and each
// hour's index is counted from the window's start once per hour.
func volumeQuery(p *store.DeliveryVolumeParams) (string, []any, error) {
	q, args, err := store.VolumeQuery(p, store.VolumeSQL{
		Hour: func(col string) string { return "date_trunc('hour', " + col + " AT TIME ZONE 'UTC')" },
		Index: func(h string) string {
			return "(extract(epoch FROM " + h + " - (?::timestamptz AT TIME ZONE 'UTC')) / 3600)::int"
		},
		At:     func(t time.Time) any { return ms(t) },
		ByTime: "host_id = ?",
	})
	return numbered(q), args, err
}

// VolumeQuery is volumeQuery (flow.Dialect).
func (flowDB) VolumeQuery(p *store.DeliveryVolumeParams) (string, []any, error) {
	return volumeQuery(p)
}
