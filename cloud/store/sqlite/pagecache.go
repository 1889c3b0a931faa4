package sqlite

import (
	"sync"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// pageSize is the database's page size (SQLite's default, which the
// migrations keep).
const pageSize = 4096

// The page cache pool, configured once per process before its first
// connection (SQLite refuses SQLITE_CONFIG_PAGECACHE once initialised).
var pagePool struct {
	once  sync.Once
	slots int // 0: not configured
	slot  int // bytes a page takes in it, header included
}

// configurePageCache gives SQLite one block of about poolKiB KiB for the
// page caches of all of the process's connections, cut in slots of a page
// and its header. Left to itself, SQLite allocates each page on its own,
// and modernc's allocator puts a page (4 KiB and a header of about 270
// bytes) in an 8 KiB slot: a cache cost twice its cache_size. In the
// pool a MiB of cache is a MiB of memory.
//
// The pool is also a bound: while it is nearly full, every connection's
// cache reuses its least recently used pages (across connections: SQLite
// keeps one LRU for all) instead of growing. A page that finds no slot
// (every page pinned, or a page larger than pageSize) is allocated on its
// own, as before.
//
// It reports whether the pool is in place: not when a connection was
// opened in this process before; SQLite then allocates page by page.
func configurePageCache(poolKiB int) bool {
	pagePool.once.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		va := libc.Xmalloc(tls, types.Size_t(3*unsafe.Sizeof(uintptr(0))))
		if va == 0 {
			return
		}
		defer libc.Xfree(tls, va)
		hdr := libc.Xmalloc(tls, 8)
		if hdr == 0 {
			return
		}
		defer libc.Xfree(tls, hdr)
		// The bytes of header SQLite keeps beside each page.
		if sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_PCACHE_HDRSZ, libc.VaList(va, hdr)) != sqlite3.SQLITE_OK {
			return
		}
		slot := (pageSize + int(libc.AtomicLoadPInt32(hdr)) + 7) &^ 7
		slots := poolKiB * 1024 / slot
		if slots < 16 {
			return
		}
		// The pool lives as long as the process: SQLite holds it until
		// sqlite3_shutdown, which nothing calls.
		pool := libc.Xmalloc(tls, types.Size_t(slots*slot))
		if pool == 0 {
			return
		}
		if sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_PAGECACHE, libc.VaList(va, pool, int32(slot), int32(slots))) != sqlite3.SQLITE_OK {
			libc.Xfree(tls, pool)
			return
		}
		pagePool.slots, pagePool.slot = slots, slot
	})
	return pagePool.slots > 0
}
