// Package dbfile keeps a SQLite database's files private: the cloud's
// embedded store and the host's ledger both hold what only their owner
// should read (webhook bodies, handler output).
package dbfile

import (
	"errors"
	"fmt"
	"os"
)

// MakePrivate makes the database file before SQLite does, 0600 whatever
// the umask and its directory's mode, and takes group and world access from
// an existing one and its -wal and -shm files. SQLite creates the -wal and
// -shm files with the database file's mode, so they follow.
func MakePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range files(path) {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckPrivate says which of the database's files (each must exist) is
// readable or writable by anyone but its owner.
func CheckPrivate(path string) error {
	for _, p := range files(path) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			return fmt.Errorf("%s: mode %#o, want 0600", p, perm)
		}
	}
	return nil
}

func files(path string) []string { return []string{path, path + "-wal", path + "-shm"} }
