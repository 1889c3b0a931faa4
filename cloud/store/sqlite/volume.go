package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

func (s *Store) DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error) {
	q, args, err := volumeQuery(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery volume: %w", err)
	}
	defer rows.Close()
	return store.VolumeHours(p, scanVolume(rows))
}

// volumeQuery is DeliveryVolume's query in SQLite: times are unix
// milliseconds, an hour is one divided by an hour's, its index that less
// the window start's. A unary + keeps the host from choosing the index
// where the time should.
func volumeQuery(p *store.DeliveryVolumeParams) (string, []any, error) {
	return store.VolumeQuery(p, store.VolumeSQL{
		Hour:   func(col string) string { return col + " / 3600000" },
		Index:  func(h string) string { return h + " - ? / 3600000" },
		At:     func(t time.Time) any { return dbTime(t) },
		ByTime: "+host_id = ?",
	})
}

func scanVolume(rows *sql.Rows) func() (string, int, int, bool, error) {
	return func() (outcome string, hour, n int, ok bool, err error) {
		if !rows.Next() {
			return "", 0, 0, false, rows.Err()
		}
		err = rows.Scan(&outcome, &hour, &n)
		return outcome, hour, n, err == nil, err
	}
}
