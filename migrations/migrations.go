// Package migrations embeds the cloud store's SQL migrations, one directory
// per engine, in goose's format. The engines apply them with goose's Provider
// from their Migrate method.
package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
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

// Hash is a short hash of an engine's migration files (Postgres or
// SQLite): test templates built from one set are never used for another.
func Hash(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// sub roots fsys at dir. The directories are embedded above, so fs.Sub can
// only fail on a programming error caught by the package's tests.
func sub(fsys embed.FS, dir string) fs.FS {
	s, err := fs.Sub(fsys, dir)
	if err != nil {
		panic("migrations: " + err.Error())
	}
	return s
}
