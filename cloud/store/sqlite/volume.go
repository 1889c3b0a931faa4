package sqlite

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// volumeQuery is a volume count's query in SQLite: times are unix
// milliseconds, an hour is one divided by an hour's, its index that less
// Base's. A unary + keeps the host from choosing the index where the time
// should.
func volumeQuery(r store.VolumeRange) (string, []any) {
	return store.VolumeRangeQuery(r, store.VolumeSQL{
		Hour:   func(col string) string { return col + " / 3600000" },
		Index:  func(h string) string { return h + " - ? / 3600000" },
		At:     func(t time.Time) any { return dbTime(t) },
		ByTime: "+host_id = ?",
		Host:   "+host_id",
	})
}

// VolumeQuery is volumeQuery (flow.Dialect).
func (flowDB) VolumeQuery(r store.VolumeRange) (string, []any) { return volumeQuery(r) }
