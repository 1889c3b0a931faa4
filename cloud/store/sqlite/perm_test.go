package sqlite_test

import (
	"context"
	"io"
	"testing"

	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/shared/dbfile/dbfiletest"
)

// TestFilesPrivate: in a directory that already existed 0755, under umask
// 022, the database and its -wal and -shm files are 0600; a database left
// 0644 by an older version is made 0600 when opened.
func TestFilesPrivate(t *testing.T) {
	ctx := context.Background()
	dbfiletest.FilesPrivate(t, "cloud.db", func(path string) (io.Closer, error) {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		if err := s.Migrate(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	})
}
