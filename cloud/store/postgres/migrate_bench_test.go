package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkMigrations times the migrations that build indexes or count
// the deliveries on a populated store, as an upgrade meets them: the store
// filled as TestIncidentReadsUseIndexes fills it to RELAY_BENCH_DELIVERIES
// deliveries (default 300,000), each with a small body and two audit
// events (fillTrails), taken back down to before the groups
// (migration 19, which builds two unique indexes), then up again one at a
// time, each timed. The figures are in docs/deploy.md (Upgrading).
//
//	RELAY_BENCH_DELIVERIES=5000000 go test -run '^$' -bench Migrations -benchtime 1x -timeout 2h ./cloud/store/postgres/
func BenchmarkMigrations(b *testing.B) {
	ctx := context.Background()
	n := storetest.BenchDeliveries(300_000)
	_, conn, url := openWithConn(ctx, b)
	t0 := time.Now()
	fillIncident(ctx, b, conn, n)
	fillTrails(ctx, b, conn)
	b.Logf("filled %d deliveries in %s", n, time.Since(t0).Round(time.Millisecond))
	p, _ := migrator(b, url)
	storetest.TimeMigrations(b, p, 18, n)
}
