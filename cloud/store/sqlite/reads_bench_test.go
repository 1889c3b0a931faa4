package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkIncidentReads times storetest.BenchIncidentReads, the reads an
// operator runs during an incident, on RELAY_BENCH_DELIVERIES deliveries
// (default 300,000) stored as TestIncidentReadsUseIndexes stores them: 60 % acked,
// 2 % dead-lettered, the rest queued, over 50 hosts, statistics gathered
// as Migrate gathers them.
//
//	RELAY_BENCH_DELIVERIES=1000000 go test -run '^$' -bench IncidentReads -benchtime 30x ./cloud/store/sqlite/
func BenchmarkIncidentReads(b *testing.B) {
	ctx := context.Background()
	n := storetest.BenchDeliveries(300_000)
	path := filepath.Join(b.TempDir(), "cloud.db")
	s, err := Open(ctx, path)
	require.NoError(b, err)
	require.NoError(b, s.Migrate(ctx))
	fillIncident(ctx, b, s, n)
	_, err = s.write.ExecContext(ctx, optimizeOnOpen)
	require.NoError(b, err)
	require.NoError(b, s.Close())
	s, err = Open(ctx, path) // readers that load the statistics
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	var correlationID string
	require.NoError(b, s.read.QueryRowContext(ctx, `SELECT correlation_id FROM deliveries WHERE rowid = 1234`).Scan(&correlationID))

	storetest.BenchIncidentReads(b, s, correlationID)
}
