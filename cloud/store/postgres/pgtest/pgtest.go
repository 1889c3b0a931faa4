// Package pgtest gives each test its own migrated Postgres database, cloned
// from a template database that is migrated once per server and migration
// set. The server comes from RELAY_TEST_DATABASE_URL (scripts/pgtest.sh
// starts a throwaway one).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/migrations"
)

const (
	// EnvURL names the environment variable holding the URL of a Postgres
	// server tests may create databases on (the database in it is only used
	// to connect).
	EnvURL = "RELAY_TEST_DATABASE_URL"
	// EnvRequire, set to 1, makes a missing EnvURL fail tests instead of
	// skipping them (CI sets it).
	EnvRequire = "RELAY_REQUIRE_POSTGRES"
)

// templateLockKey is the advisory lock that serializes template creation
// across test binaries running at once.
const templateLockKey = 0x72656c6179746d70 // "relaytmp"

var (
	mu        sync.Mutex
	templates = map[string]string{} // server URL → ready template name
)

// ServerURL returns the test server's URL. Without one it skips t, or fails
// it when EnvRequire is 1.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set but %s=1: start a server with scripts/pgtest.sh start DIR and export its URL", EnvURL, EnvRequire)
		}
		t.Skipf("Postgres tests skipped: %s is not set (export %s=$(scripts/pgtest.sh start /tmp/relay-pg))", EnvURL, EnvURL)
	}
	return u
}

// NewDatabase creates a fresh, migrated database for t alone and returns its
// URL. The database is dropped when t finishes.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	template, err := ensureTemplate(ctx, server)
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}
	name, err := randomName()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := adminExec(ctx, server,
		"CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	dbURL, err := withDatabase(server, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dbURL
}

// ensureTemplate returns the name of a migrated template database on the
// server, creating it if needed. The name carries a hash of the migrations,
// so a server reused across changes never hands out a stale schema.
func ensureTemplate(ctx context.Context, server string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if name, ok := templates[server]; ok {
		return name, nil
	}
	sum, err := migrations.Hash(migrations.Postgres)
	if err != nil {
		return "", err
	}
	name := "relay_template_" + sum

	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLockKey)); err != nil {
		return "", fmt.Errorf("advisory lock: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(templateLockKey)) //nolint:errcheck // closing the session unlocks too

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if !exists {
		if err := buildTemplate(ctx, conn, server, name); err != nil {
			return "", err
		}
	}
	templates[server] = name
	return name, nil
}

// buildTemplate migrates a scratch database and renames it to name, so that
// a template that exists is always complete.
func buildTemplate(ctx context.Context, conn *pgx.Conn, server, name string) error {
	build := name + "_build"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{build}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop stale build: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{build}.Sanitize()); err != nil {
		return fmt.Errorf("create build: %w", err)
	}
	buildURL, err := withDatabase(server, build)
	if err != nil {
		return err
	}
	s, err := postgres.Open(ctx, buildURL)
	if err != nil {
		return err
	}
	err = s.Migrate(ctx)
	s.Close()
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{build}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("rename build: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE true"); err != nil {
		return fmt.Errorf("mark template: %w", err)
	}
	return nil
}

func randomName() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return fmt.Sprintf("relay_test_%d_%s", os.Getpid(), hex.EncodeToString(b)), nil
}

// adminExec runs one statement on the server's own database.
func adminExec(ctx context.Context, server, sql string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns server's URL pointing at database name.
func withDatabase(server, name string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL, got %q", EnvURL, redact(server))
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.Index(s, "@"); i >= 0 {
		return "…" + s[i:]
	}
	return s
}
