package ledger

import (
	"context"
	"io"
	"testing"

	"github.com/relaykit/relay/shared/dbfile/dbfiletest"
)

// TestFilesPrivate: in a state directory that already existed 0755, under
// umask 022, the ledger and its -wal and -shm files are 0600; a ledger left
// 0644 by an older version is made 0600 when opened.
func TestFilesPrivate(t *testing.T) {
	ctx := context.Background()
	dbfiletest.FilesPrivate(t, "ledger.db", func(path string) (io.Closer, error) {
		l, err := Open(ctx, path)
		if err != nil {
			return nil, err
		}
		if _, err := l.DeliveryRecord(ctx, RecordParams{Entry: entry("github:a:1", ResultSuccess, t0)}); err != nil {
			l.Close()
			return nil, err
		}
		return l, nil
	})
}
