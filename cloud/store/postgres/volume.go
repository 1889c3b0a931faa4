package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

func (s *Store) DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error) {
	q, args, err := volumeQuery(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery volume: %w", err)
	}
	defer rows.Close()
	return store.VolumeHours(p, scanVolume(rows))
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

func scanVolume(rows pgx.Rows) func() (string, int, int, bool, error) {
	return func() (outcome string, hour, n int, ok bool, err error) {
		if !rows.Next() {
			return "", 0, 0, false, rows.Err()
		}
		var h int32
		var c int64
		err = rows.Scan(&outcome, &h, &c)
		return outcome, int(h), int(c), err == nil, err
	}
}
