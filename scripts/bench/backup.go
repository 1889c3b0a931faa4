package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// The scale scenario's backup phase, on SQLite: `cloud backup` of the
// filled store while intake runs at scaleE2ERate (as docs/deploy.md has an
// operator run it, online), then a restore: a second cloud started on the
// copy, with the same keys, until it is ready and answers for a delivery
// of the fill. Postgres is backed up with pg_dump, not measured here.

// backupRow is the phase's figures.
type backupRow struct {
	took        time.Duration // `cloud backup`, the process's start included
	bytes       int64         // the copy's size
	walMax      int64         // the largest cloud.db-wal seen while it ran (-1 unknown)
	sent, errs  int
	p50, p99    time.Duration // intake's POST → answer meanwhile
	restoreTook time.Duration // a cloud started on the copy until /readyz answers
	load        float64
	err         string
}

func (r *run) measureBackup(s *scaleSamples) backupRow {
	b := r.b
	row := backupRow{walMax: -1, load: loadAverage()}
	path := strings.TrimPrefix(r.dbURL, "sqlite:")
	dest := filepath.Join(r.dir, "backup.db")
	// The copy goes, with the WAL of the cloud that ran on it: at 5 million
	// it is 28 GiB, kept or not.
	defer func() {
		for _, f := range []string{dest, dest + "-wal", dest + "-shm"} {
			os.Remove(f)
		}
	}()

	// The WAL's size every second: a reader's snapshot held for the whole
	// copy keeps checkpoints from going past it.
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if fi, err := os.Stat(path + "-wal"); err == nil {
				row.walMax = max(row.walMax, fi.Size())
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	ctx, cancel := context.WithCancel(b.ctx)
	sender := r.sender(64)
	var res loadResult
	var sending sync.WaitGroup
	sending.Add(1)
	go func() {
		defer sending.Done()
		res = sender.openLoop(ctx, scaleE2ERate, 24*time.Hour, 64, nil, nil)
	}()
	t0 := time.Now()
	cmd := exec.CommandContext(b.ctx, b.bins.Cloud, "backup", dest)
	cmd.Env = append(os.Environ(), "RELAY_DATABASE_URL="+r.dbURL)
	out, err := cmd.CombinedOutput()
	row.took = time.Since(t0)
	cancel()
	sending.Wait()
	close(stop)
	sampler.Wait()
	if err != nil {
		row.err = r.fail(fmt.Errorf("cloud backup: %w: %s", err, oneLine(string(out))))
		return row
	}
	p := newPercentiles(res.Lat)
	row.sent, row.errs, row.p50, row.p99 = res.OK+res.BadStatus+res.Transport, res.BadStatus, p.at(0.5), p.at(0.99)
	if fi, err := os.Stat(dest); err == nil {
		row.bytes = fi.Size()
	}
	logf("scale %s: backup of %s in %s (%d bytes)", r.engine, path, row.took.Round(time.Millisecond), row.bytes)

	// The restore: the copy in place of a database, the same keys.
	t1 := time.Now()
	c, err := rig.StartCloud(b.ctx, rig.CloudConfig{Bin: b.bins.Cloud, DatabaseURL: "sqlite:" + dest,
		DataDir: r.cloud.Cfg.DataDir, LogPath: filepath.Join(r.dir, "restored.log"), Env: cloudEnv, ReadyWithin: 30 * time.Minute})
	if err != nil {
		row.err = r.fail(fmt.Errorf("start a cloud on the backup: %w", err))
		return row
	}
	row.restoreTook = time.Since(t1)
	defer c.Close()
	if s.older != nil {
		var d map[string]any
		if err := c.Do(b.ctx, "GET", "/api/hosts/"+url.PathEscape(s.older.HostID)+"/webhooks/"+url.PathEscape(s.older.ID), nil, &d); err != nil {
			row.err = r.fail(fmt.Errorf("the restored cloud: a delivery of the fill: %w", err))
			return row
		}
	}
	logf("scale %s: a cloud ready on the backup in %s", r.engine, row.restoreTook.Round(time.Millisecond))
	return row
}
