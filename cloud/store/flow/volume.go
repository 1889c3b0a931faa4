package flow

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// volume runs an engine's DeliveryVolume query (Dialect.VolumeQuery) on q
// and lays its rows out as store.DeliveryVolume answers them.
func volume(ctx context.Context, q Executor, p *store.DeliveryVolumeParams, query string, args []any) ([]store.VolumeHour, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery volume: %w", err)
	}
	defer rows.Close()
	return store.VolumeHours(p, func() (outcome string, hour, n int, ok bool, err error) {
		if !rows.Next() {
			return "", 0, 0, false, rows.Err()
		}
		var h, c int64
		err = rows.Scan(&outcome, &h, &c)
		return outcome, int(h), int(c), err == nil, err
	})
}
