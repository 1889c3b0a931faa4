package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/cloud/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	storetest.Exercise(ctx, t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		require.NoError(t, s.Migrate(ctx))
		return s
	})
}

func TestOpenRejectsNonFilePaths(t *testing.T) {
	for _, path := range []string{"", ":memory:", "x.db?mode=ro"} {
		_, err := sqlite.Open(context.Background(), path)
		require.Error(t, err, path)
	}
}
