package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

// BenchmarkHostList answers GET /api/hosts over loopback HTTP with 1,000
// hosts, each with four deliveries (two acked, one queued, and one
// delivering or dead-lettered): the first page (100 hosts), the largest
// (500), and a page of the hosts online, which reads through every host to
// find none.
//
//	go test -run '^$' -bench HostList -benchtime 200x ./cloud/server/
func BenchmarkHostList(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchHostList(b, sqlitetest.Open(b)) })
	b.Run("postgres", func(b *testing.B) {
		st, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
		require.NoError(b, err)
		benchHostList(b, st)
	})
}

func benchHostList(b *testing.B, st store.Store) {
	s := testServer(b, st, clockwork.NewRealClock(), nil, Config{AdminToken: testAdmin})
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(func() { srv.Close(); st.Close() })
	ctx := context.Background()
	now := time.Now()
	for i := range 1000 {
		h, err := s.CreateHost(ctx, fmt.Sprintf("host %d", i))
		require.NoError(b, err)
		for k := range 4 {
			_, err := st.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: fmt.Sprintf("github:e%d-%d:1", i, k), HostID: h.ID,
				Source: "github", EventID: fmt.Sprintf("e%d-%d", i, k), RawBody: []byte("{}"), ReceivedAt: now, MaxAttempts: 1})
			require.NoError(b, err)
		}
		leased, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: h.ID, Max: 3, LeaseFor: time.Hour, Now: now})
		require.NoError(b, err)
		_, err = st.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: h.ID, IDs: []string{leased.Deliveries[0].ID, leased.Deliveries[1].ID}, Now: now})
		require.NoError(b, err)
		if i%2 == 0 {
			_, err = st.DeliveryNack(ctx, delivery.NackParams(h.ID, []delivery.Nack{{ID: leased.Deliveries[2].ID}}, delivery.RetryPolicy{}, now))
			require.NoError(b, err)
		}
	}
	get := func(query string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/hosts"+query, nil)
		req.Header.Set("Authorization", "Bearer "+testAdmin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		n, _ := io.Copy(io.Discard, resp.Body)
		require.Equal(b, 200, resp.StatusCode)
		return int(n)
	}
	for _, q := range []struct{ name, query string }{{"page", ""}, {"page-500", "?limit=500"}, {"online", "?presence=online"}} {
		b.Run(q.name, func(b *testing.B) {
			b.SetBytes(int64(get(q.query)))
			for b.Loop() {
				get(q.query)
			}
		})
	}
}
