package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkIncidentReads times storetest.BenchIncidentReads, the reads an
// operator runs during an incident, on RELAY_BENCH_DELIVERIES deliveries
// (default 300,000) stored as TestIncidentReadsUseIndexes stores them: 60 % acked,
// 2 % dead-lettered, the rest queued, over 50 hosts, analyzed, the
// changes to the counts not folded (at most 5 s of them, in service).
//
//	RELAY_BENCH_DELIVERIES=1000000 go test -run '^$' -bench IncidentReads -benchtime 30x ./cloud/store/postgres/
func BenchmarkIncidentReads(b *testing.B) {
	ctx := context.Background()
	n := storetest.BenchDeliveries(300_000)
	s, conn, _ := openWithConn(ctx, b)
	fillIncident(ctx, b, conn, n)
	_, err := s.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{})
	require.NoError(b, err)
	var correlationID string
	require.NoError(b, conn.QueryRow(ctx, `SELECT correlation_id FROM deliveries WHERE event_id = 'e1234'`).Scan(&correlationID))

	storetest.BenchIncidentReads(b, s, correlationID)
}
