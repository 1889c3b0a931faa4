package rig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway server started by scripts/pgtest.sh.
type Postgres struct {
	URL  string // the server's postgres database
	Dir  string // its pgtest directory
	root string
	n    atomic.Int64
}

// StartPostgres starts a server in dir (new or empty, or one StopKeep
// left, whose data it starts again) with scripts/pgtest.sh from the module
// root. Durable keeps fsync and
// synchronous_commit on (PGTEST_DURABLE=1), as benchmarks need.
//
// Run as root, the server runs as the postgres user, which must be able to
// reach dir: every parent must be searchable by others (a t.TempDir() is
// not). An empty dir makes a new one under os.TempDir().
//
// settings, each "name = value", go into the server's configuration before
// it starts (PGTEST_SETTINGS), over pgtest.sh's own.
func StartPostgres(ctx context.Context, root, dir string, durable bool, settings ...string) (*Postgres, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "rig-pg-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "pgtest.sh"), "start", dir)
	cmd.Env = os.Environ()
	if durable {
		cmd.Env = append(cmd.Env, "PGTEST_DURABLE=1")
	} else {
		cmd.Env = append(cmd.Env, "PGTEST_DURABLE=0")
	}
	if len(settings) > 0 {
		cmd.Env = append(cmd.Env, "PGTEST_SETTINGS="+strings.Join(settings, "\n"))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("rig: pgtest.sh start: %w\n%s", err, stderr.String())
	}
	url := strings.TrimSpace(string(out))
	if url == "" {
		return nil, fmt.Errorf("rig: pgtest.sh start printed no URL\n%s", stderr.String())
	}
	return &Postgres{URL: url, Dir: dir, root: root}, nil
}

// NewDatabase creates a fresh, empty database on the server and returns its
// URL. The name gets a counter appended so every call gives a new one.
func (p *Postgres) NewDatabase(ctx context.Context, prefix string) (string, error) {
	name := fmt.Sprintf("%s_%d", sanitize(prefix), p.n.Add(1))
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return "", fmt.Errorf("rig: connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rig: create database %s: %w", name, err)
	}
	return strings.Replace(p.URL, "/postgres?", "/"+name+"?", 1), nil
}

// DropDatabase drops a database made by NewDatabase (given its URL), closing
// any connections still open to it.
func (p *Postgres) DropDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return fmt.Errorf("rig: connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{cfg.Database}.Sanitize()+" WITH (FORCE)")
	return err
}

// ServerPID is the postmaster's process id (from its postmaster.pid), the
// root of the server's processes: see TreeCPUTicks.
func (p *Postgres) ServerPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(p.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// Stop stops the server and removes its directory.
func (p *Postgres) Stop() error {
	return p.stop("stop", p.Dir)
}

// StopKeep stops the server and keeps its directory, data and log: a
// filled store can be examined after the run. StartPostgres (pgtest.sh
// start) on Dir starts the same data again.
func (p *Postgres) StopKeep() error {
	return p.stop("stop", "--keep", p.Dir)
}

func (p *Postgres) stop(args ...string) error {
	cmd := exec.Command(filepath.Join(p.root, "scripts", "pgtest.sh"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rig: pgtest.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "db"
	}
	return b.String()
}
