package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/store/storetest"
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
	storetest.HostsOfFour(ctx, b, st, 1000, now, func(name string) (string, error) {
		h, err := s.CreateHost(ctx, name)
		if err != nil {
			return "", err
		}
		return h.ID, nil
	})
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
