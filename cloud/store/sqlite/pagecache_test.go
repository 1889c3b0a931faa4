package sqlite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// pageCacheStatus reads one of SQLite's process-wide page cache counters.
func pageCacheStatus(t *testing.T, op int32) (current, highwater int64) {
	tls := libc.NewTLS()
	defer tls.Close()
	p := libc.Xmalloc(tls, 16)
	require.NotZero(t, p)
	defer libc.Xfree(tls, p)
	require.Equal(t, int32(sqlite3.SQLITE_OK), sqlite3.Xsqlite3_status64(tls, op, p, p+8, 0))
	return libc.AtomicLoadPInt64(p), libc.AtomicLoadPInt64(p + 8)
}

// The pages of every connection's cache sit in the one pool, end to end,
// and a write load larger than the pool stays in it: its least recently
// used pages are reused rather than more allocated.
func TestPageCachePool(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.True(t, configurePageCache(1024), "the pool is configured by the first Open of the process")
	require.Greater(t, pagePool.slots, 0)
	if pagePool.slots*pagePool.slot > 16<<20 {
		t.Skip("the pool was sized by an earlier Open of a larger cache")
	}
	require.GreaterOrEqual(t, pagePool.slot, pageSize)
	require.Less(t, pagePool.slot, pageSize+pageSize/8, "a slot is a page and its header, not twice a page")

	// Random keys dirty pages all over an index: several times the pool.
	_, err = s.write.ExecContext(ctx, "CREATE TABLE pool_probe (k TEXT PRIMARY KEY, v BLOB)")
	require.NoError(t, err)
	key := make([]byte, 16)
	rows := 3 * pagePool.slots * pagePool.slot / 400
	for done := 0; done < rows; {
		tx, err := s.write.BeginTx(ctx, nil)
		require.NoError(t, err)
		for i := 0; i < 500 && done < rows; i, done = i+1, done+1 {
			_, _ = rand.Read(key)
			_, err = tx.ExecContext(ctx, "INSERT INTO pool_probe VALUES (?, zeroblob(300))", hex.EncodeToString(key))
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
	}
	used, usedHigh := pageCacheStatus(t, sqlite3.SQLITE_STATUS_PAGECACHE_USED)
	overflow, overflowHigh := pageCacheStatus(t, sqlite3.SQLITE_STATUS_PAGECACHE_OVERFLOW)
	t.Logf("pool %d slots of %d bytes; used %d (high %d); overflow %d bytes (high %d)", pagePool.slots, pagePool.slot, used, usedHigh, overflow, overflowHigh)
	require.Greater(t, usedHigh, int64(DefaultCacheMB<<20/pagePool.slot*9/10), "the writer's cache is in the pool")
	require.LessOrEqual(t, usedHigh, int64(pagePool.slots))
	require.Less(t, overflowHigh, int64(64*pagePool.slot), "pages past the pool are the exception")
}
