package migrations_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/migrations"
)

func TestEmbedded(t *testing.T) {
	for name, fsys := range map[string]fs.FS{"postgres": migrations.Postgres, "sqlite": migrations.SQLite} {
		files, err := fs.Glob(fsys, "*.sql")
		require.NoError(t, err, name)
		require.Contains(t, files, "00001_init.sql", name)
	}
}
