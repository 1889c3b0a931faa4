package rig

import (
	"context"
	"database/sql"
	"strings"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite", to read a cloud's SQLite file
)

// DBBytes is what a cloud's database holds and has written, read while the
// cloud runs.
type DBBytes struct {
	// Size is the database's size: on SQLite its pages (page_count ×
	// page_size, as a reader sees the last commit, the write-ahead log's
	// pages included); on Postgres pg_database_size (tables, indexes,
	// TOAST).
	Size int64
	// WAL is the position of the server's write-ahead log, in bytes from
	// its start (pg_current_wal_lsn): the difference of two readings is
	// what the server wrote to it between them. -1 on SQLite, whose log is
	// rewritten in place after each checkpoint.
	WAL int64
}

// ReadDBBytes reads DBBytes of the database at url ("sqlite:PATH" or a
// Postgres URL).
func ReadDBBytes(ctx context.Context, url string) (DBBytes, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			return DBBytes{}, err
		}
		defer db.Close()
		var pages, size int64
		if err := db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return DBBytes{}, err
		}
		if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size); err != nil {
			return DBBytes{}, err
		}
		return DBBytes{Size: pages * size, WAL: -1}, nil
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return DBBytes{}, err
	}
	defer conn.Close(ctx)
	var b DBBytes
	err = conn.QueryRow(ctx, `SELECT pg_database_size(current_database()), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&b.Size, &b.WAL)
	return b, err
}
