package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
)

// backup copies a SQLite database to a new file while cloud serve runs:
// VACUUM INTO reads one consistent snapshot (WAL readers do not block the
// writer, nor it them) and writes a compact copy. Postgres has pg_dump.
func backup(ctx context.Context, args []string) error {
	var o options
	fs := o.flagSet("backup")
	if _, err := o.parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageError{errors.New("usage: cloud backup FILE")}
	}
	dest := fs.Arg(0)
	path, ok := strings.CutPrefix(o.databaseURL, "sqlite:")
	if !ok {
		return usageError{errors.New("RELAY_DATABASE_URL: cloud backup copies a SQLite database; back Postgres up with pg_dump (docs/deploy.md)")}
	}
	path = strings.TrimPrefix(path, "//")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// VACUUM INTO wants a file that does not exist or is empty; one made
	// here is private from the start (the copy holds every body and the
	// sealed secrets) and is not someone else's file overwritten.
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return usageError{fmt.Errorf("%s exists: give a new file", dest)}
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err == nil {
		defer db.Close()
		_, err = db.ExecContext(ctx, "VACUUM INTO ?", dest)
	}
	if err != nil {
		os.Remove(dest)
		return fmt.Errorf("backup: %w", err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Printf("backed up %s to %s (%d bytes); the keys are not in it: keep RELAY_SECRET_KEYS (or secret.key) and RELAY_JWT_KEY (or jwt.key) with it\n", path, dest, fi.Size())
	return nil
}
