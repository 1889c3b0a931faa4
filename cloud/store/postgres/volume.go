package postgres

import (
	"context"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

func (s *Store) DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error) {
	q, args, err := volumeQuery(p)
	if err != nil {
		return nil, err
	}
	return flow.Volume(ctx, s.db().Read(), p, q, args)
}

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
