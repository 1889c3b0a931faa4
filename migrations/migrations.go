// Package migrations embeds the cloud store's SQL migrations, one directory
// per engine, in goose's format. The engines apply them with goose's Provider
// from their Migrate method.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres/*.sql
var postgresFiles embed.FS

//go:embed sqlite/*.sql
var sqliteFiles embed.FS

// Postgres holds the Postgres migrations, rooted at their directory.
var Postgres = sub(postgresFiles, "postgres")

// SQLite holds the SQLite migrations, rooted at their directory.
var SQLite = sub(sqliteFiles, "sqlite")

// sub roots fsys at dir. The directories are embedded above, so fs.Sub can
// only fail on a programming error caught by the package's tests.
func sub(fsys embed.FS, dir string) fs.FS {
	s, err := fs.Sub(fsys, dir)
	if err != nil {
		panic("migrations: " + err.Error())
	}
	return s
}
