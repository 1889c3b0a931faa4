package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// pgServer is the run's throwaway Postgres (scripts/pgtest.sh, fsync on). It
// can be killed the hard way (pg_ctl stop -m immediate) and started again on
// the same port and data directory.
type pgServer struct {
	srv    *rig.Postgres
	dir    string
	url    string
	port   string
	bindir string
	user   string // the owner of the data directory; "" when it is us
}

// postgres starts the run's Postgres on first use.
func (e *env) postgres(ctx context.Context) (*pgServer, error) {
	if e.pg != nil {
		return e.pg, nil
	}
	dir := filepath.Join(e.work, "pg")
	srv, err := rig.StartPostgres(ctx, e.root, dir, true)
	if err != nil {
		return nil, err
	}
	p := &pgServer{srv: srv, dir: dir, url: srv.URL}
	e.pg = p
	port, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		return nil, err
	}
	p.port = strings.TrimSpace(string(port))
	if p.bindir, err = pgBindir(); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "data"), &st); err == nil && st.Uid != 0 {
			if u, err := exec.Command("id", "-nu", fmt.Sprint(st.Uid)).Output(); err == nil {
				p.user = strings.TrimSpace(string(u))
			}
		}
	}
	e.logf("postgres %s (data %s/data, user %q)", p.url, dir, p.user)
	return p, nil
}

// pgBindir finds pg_ctl the way scripts/pgtest.sh does.
func pgBindir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) < pgVersion(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("pg_ctl not found")
}

func pgVersion(bindir string) int {
	var v int
	fmt.Sscanf(filepath.Base(filepath.Dir(bindir)), "%d", &v)
	return v
}

// pgCtl runs pg_ctl as the data directory's owner.
func (p *pgServer) pgCtl(ctx context.Context, args ...string) error {
	argv := append([]string{filepath.Join(p.bindir, "pg_ctl"), "-D", filepath.Join(p.dir, "data")}, args...)
	if p.user != "" {
		argv = append([]string{"runuser", "-u", p.user, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// kill stops the server the hard way: every backend is killed, nothing is
// flushed; committed transactions survive only through the WAL's fsync.
func (p *pgServer) kill(ctx context.Context) error {
	return p.pgCtl(ctx, "stop", "-m", "immediate", "-w", "-t", "60")
}

// start starts the killed server again on the same port; it runs crash
// recovery first.
func (p *pgServer) start(ctx context.Context) error {
	return p.pgCtl(ctx, "start", "-w", "-t", "60", "-l", filepath.Join(p.dir, "log"), "-o", "-p "+p.port)
}

func (p *pgServer) stop() { _ = p.srv.Stop() }

// newDatabase creates an empty database and returns its URL; `cloud serve`
// migrates it.
func (p *pgServer) newDatabase(ctx context.Context, prefix string) (string, error) {
	return p.srv.NewDatabase(ctx, "chaos_"+prefix)
}
