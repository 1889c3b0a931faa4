package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	pgtest.ServerURL(t) // skip (or fail) once, not in every subtest
	ctx := context.Background()
	storetest.Exercise(ctx, t, func(t *testing.T) store.Store {
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}

// Webhook bodies are lz4-compressed where the server supports it (this
// test server does).
func TestBodiesUseLZ4(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	for table, column := range map[string]string{"deliveries": "raw_body", "quarantine": "body"} {
		var method string
		require.NoError(t, conn.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2`, table, column).Scan(&method))
		require.Equal(t, "l", method, "%s.%s", table, column)
	}
}
