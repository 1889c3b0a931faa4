package sqlite

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
