package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

// BenchmarkHostList answers GET /api/hosts over loopback HTTP with 1,000
// hosts, two sources each and no deliveries: what the list costs a host.
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
	for i := range 1000 {
		_, err := s.CreateHost(context.Background(), fmt.Sprintf("host %d", i))
		require.NoError(b, err)
	}
	get := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/hosts", nil)
		req.Header.Set("Authorization", "Bearer "+testAdmin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		n, _ := io.Copy(io.Discard, resp.Body)
		require.Equal(b, 200, resp.StatusCode)
		return int(n)
	}
	b.SetBytes(int64(get()))
	b.ResetTimer()
	for range b.N {
		get()
	}
}
