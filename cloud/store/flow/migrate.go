package flow

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/relaykit/relay/cloud/store"
)

// Migrate applies the pending migrations of fsys to db, and says how many
// it applied and at which version the schema then stands
// (store.Store.MigrateReport). opts are the engine's own (a session
// locker, for one); the global registry of Go migrations is never used.
func Migrate(ctx context.Context, dialect goose.Dialect, db *sql.DB, fsys fs.FS, opts ...goose.ProviderOption) (store.MigrateResult, error) {
	p, err := goose.NewProvider(dialect, db, fsys, append(opts, goose.WithDisableGlobalRegistry(true))...)
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	applied, err := p.Up(ctx)
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return store.MigrateResult{}, fmt.Errorf("migrate: schema version: %w", err)
	}
	return store.MigrateResult{Applied: len(applied), Version: v}, nil
}
