package sqlite_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// benchBacklog opens a store holding n queued deliveries of one host and
// none of another, "idle".
func benchBacklog(b *testing.B, n int) *sqlite.Store {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "cloud.db"))
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	require.NoError(b, s.Migrate(ctx))
	for _, id := range []string{"h-busy", "idle"} {
		_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: id, Name: id, Now: time.Now()})
		require.NoError(b, err)
	}
	body := make([]byte, 1024)
	for done := 0; done < n; {
		ps := make([]*store.DeliveryInsertParams, 0, 500)
		for ; len(ps) < cap(ps) && done < n; done++ {
			e := "e-" + strconv.Itoa(done)
			ps = append(ps, &store.DeliveryInsertParams{ID: "github:" + e, HostID: "h-busy", Source: "github", EventID: e,
				RawBody: body, ReceivedAt: time.Now()})
		}
		_, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(b, err)
	}
	return s
}

// BenchmarkExpireLeasesNoneDue is the lease sweep's second-by-second pass
// over a database of 50,000 deliveries none of which is leased: what an
// idle cloud with a backlog (or a week of acked deliveries) pays each
// second.
//
//	go test -run '^$' -bench ExpireLeasesNoneDue -benchtime 200x ./cloud/store/sqlite/
func BenchmarkExpireLeasesNoneDue(b *testing.B) {
	s := benchBacklog(b, 50_000)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, 1000, time.Now()))
		require.NoError(b, err)
		require.Zero(b, n)
	}
}

// BenchmarkLeaseNothing is a lease that finds nothing for its host — a
// long poll's or a push loop's look before it waits — beside another
// host's backlog.
//
//	go test -run '^$' -bench LeaseNothing -benchtime 20000x ./cloud/store/sqlite/
func BenchmarkLeaseNothing(b *testing.B) {
	s := benchBacklog(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "idle", Max: 100, MaxBytes: 4 << 20, LeaseFor: time.Minute, Now: time.Now()})
		require.NoError(b, err)
		require.Empty(b, res.Deliveries)
	}
}
