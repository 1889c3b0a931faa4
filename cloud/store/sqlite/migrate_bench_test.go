package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkMigrations times the migrations that build indexes or count
// the deliveries on a populated store, as an upgrade meets them: the store
// filled as TestIncidentReadsUseIndexes fills it to RELAY_BENCH_DELIVERIES
// deliveries (default 300,000), taken back down to before the groups
// (migration 22, which rebuilds the table), then up again one at a time,
// each timed. The figures are in docs/deploy.md (Upgrading).
//
//	RELAY_BENCH_DELIVERIES=5000000 go test -run '^$' -bench Migrations -benchtime 1x -timeout 2h ./cloud/store/sqlite/
func BenchmarkMigrations(b *testing.B) {
	ctx := context.Background()
	n := storetest.BenchDeliveries(300_000)
	s, err := Open(ctx, filepath.Join(b.TempDir(), "cloud.db"))
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	require.NoError(b, s.Migrate(ctx))
	t0 := time.Now()
	fillIncident(ctx, b, s, n)
	b.Logf("filled %d deliveries in %s", n, time.Since(t0).Round(time.Millisecond))
	storetest.TimeMigrations(b, migrator(b, s), 21, n)
}
