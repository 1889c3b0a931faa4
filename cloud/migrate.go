package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// openStore picks the engine from the URL's scheme; sqliteCacheMB is the
// SQLite writer's page cache (0: the default).
func openStore(ctx context.Context, url string, sqliteCacheMB int) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url)
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("database directory: %w", err)
		}
		return sqlite.OpenWith(ctx, path, sqlite.Options{CacheMB: sqliteCacheMB})
	}
	return nil, usageError{fmt.Errorf("RELAY_DATABASE_URL=%q: want postgres://… or sqlite:PATH", redactURL(url))}
}

// groupFlushers is how many intake transactions may be open at once:
// SQLite has one writer; on Postgres one batch gathers while another
// commits. More flushers make smaller batches, each costing Postgres a
// commit: on two cores, 4 flushers took more of the database's CPU per
// webhook than 2 for no more webhooks/s, and a longer tail at 2,000/s.
func groupFlushers(url string) int {
	if strings.HasPrefix(url, "sqlite:") {
		return 1
	}
	return 2
}

// openMigrated opens the store and applies pending migrations.
func openMigrated(ctx context.Context, url string, sqliteCacheMB int) (store.Store, store.MigrateResult, error) {
	st, err := openStore(ctx, url, sqliteCacheMB)
	if err != nil {
		return nil, store.MigrateResult{}, err
	}
	res, err := st.MigrateReport(ctx)
	if err != nil {
		st.Close()
		return nil, res, fmt.Errorf("migrate: %w", err)
	}
	// Reading the migrations leaves about 12 MiB of garbage (goose parses
	// every file at once, each through a 4 MiB buffer of its own). Left to
	// the collector, it set the heap's goal under the first load to twice
	// that, and the embedded cloud's peak RSS to 85–97 MiB at 256 senders
	// where it holds 70–75 once settled: returned now, it costs nothing.
	runtime.GC() // the parser pools its buffers: the first collection moves them aside, the next frees them
	debug.FreeOSMemory()
	return st, res, nil
}

// migrated says what a migration run did, as `cloud migrate` prints it.
func migrated(res store.MigrateResult) string {
	if res.Applied == 0 {
		return fmt.Sprintf("schema current at version %d", res.Version)
	}
	return fmt.Sprintf("%d migrations applied (now at version %d)", res.Applied, res.Version)
}

func migrate(ctx context.Context, args []string) error {
	o, _, err := parse("migrate", args)
	if err != nil {
		return err
	}
	st, res, err := openMigrated(ctx, o.databaseURL, o.sqliteCacheMB)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Println(migrated(res))
	return nil
}
