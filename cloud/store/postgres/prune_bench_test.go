package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkPrune is retention's cost on Postgres (storetest.BenchPrune).
//
//	go test -run '^$' -bench Prune -benchtime 50000x ./cloud/store/postgres/
func BenchmarkPrune(b *testing.B) {
	s, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	storetest.BenchPrune(b, s)
}
