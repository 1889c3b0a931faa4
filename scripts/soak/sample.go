// Command soak is the relay's long run (`make soak`): about an hour of
// steady signed traffic, with nothing allowed to grow.
//
// Two clouds run side by side, one on SQLite and one on a throwaway
// Postgres, each with three hosts; every host has a GitHub, a Stripe and a
// Slack source forwarding to one local receiver. A sender posts signed
// webhooks at a steady rate, spread over the clouds, hosts and providers,
// and retries a non-2xx answer as a provider would. Along the way:
//
//   - a host is restarted now and then (SIGTERM, then started again);
//   - a share of the webhooks fail their first attempt at the receiver
//     (503) and are retried by the cloud's schedule;
//   - a smaller share fail until they are dead-lettered, and are then
//     retried by hand (POST …/retry), as an operator would once the app is
//     fixed;
//   - retention runs with short windows (acked and dead-lettered deliveries
//     pruned after two minutes, one in -short).
//
// Every -every (1 min; 15 s in -short) it samples, per engine: the cloud's
// RSS, goroutines and open file descriptors, the database's size and its
// WAL, the deliveries pending (queued, retrying) and in flight (delivering,
// delivered) over all hosts, and the hosts' RSS, threads and open file
// descriptors (summed over the three). It writes the samples as a table
// (SOAK.md) and a small SVG plot of each series (soak.svg) into -out.
//
// It passes when:
//
//   - every webhook was answered 2xx within five tries (the sender's);
//   - every series is flat after warm-up: the mean of its last quarter of
//     samples is at most 10 % above the mean of its second quarter, plus a
//     small absolute allowance per series (allowance, below) so that a
//     series near zero is not failed for noise;
//   - every webhook answered 2xx was handled exactly once: the receiver
//     answered 200 to exactly one forward of it (its Idempotency-Key), and
//     to none that was not answered 2xx;
//   - nothing is left that should not be: once the sender stops and the
//     last dead letters are retried, no delivery is queued, retrying,
//     delivering, delivered or dead-lettered on either cloud.
//
// Usage:
//
//	go run ./scripts/soak [-short] [-for 1h] [-every 1m] [-rate 20] [-out DIR] [-keep]
//
// -short runs for 4 minutes, sampling every 15 s (without -out it writes
// nothing but the table to stdout). The exit status is 1 when a check
// failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// sample is one reading of every series, per engine.
type sample struct {
	at     time.Duration // since the start
	values map[string]float64
}

// series are the sampled series, in table order, with their units.
var series = []struct{ key, head string }{
	{"cloud_rss", "cloud RSS MiB"},
	{"cloud_goroutines", "cloud goroutines"},
	{"cloud_fds", "cloud fds"},
	{"db", "db MiB"},
	{"wal", "WAL MiB"},
	{"pending", "pending"},
	{"inflight", "in flight"},
	{"host_rss", "hosts RSS MiB"},
	{"host_threads", "hosts threads"},
	{"host_fds", "hosts fds"},
}

func takeSample(ctx context.Context, engines []*engine, at time.Duration) sample {
	s := sample{at: at, values: map[string]float64{}}
	set := func(e *engine, key string, v float64) { s.values[e.name+"."+key] = v }
	for _, e := range engines {
		pid := e.cloud.PID()
		if p, err := rig.ReadProc(pid); err == nil {
			set(e, "cloud_rss", mib(p.VmRSS))
		}
		if n, err := rig.OpenFDs(pid); err == nil {
			set(e, "cloud_fds", float64(n))
		}
		if g, err := e.cloud.Metric(ctx, "go_goroutines"); err == nil {
			set(e, "cloud_goroutines", g)
		}
		db, wal := dbSize(ctx, e.dbURL)
		set(e, "db", mib(db))
		set(e, "wal", mib(wal))
		var pending, inflight, rss, threads, fds float64
		for i, id := range e.ids {
			if c, err := e.cloud.Counts(ctx, id); err == nil {
				pending += float64(c["queued"] + c["retrying"])
				inflight += float64(c["delivering"] + c["delivered"])
			}
			if p, err := rig.ReadProc(e.hosts[i].PID()); err == nil {
				rss += mib(p.VmRSS)
				threads += float64(p.NumThreads)
			}
			if n, err := rig.OpenFDs(e.hosts[i].PID()); err == nil {
				fds += float64(n)
			}
		}
		set(e, "pending", pending)
		set(e, "inflight", inflight)
		set(e, "host_rss", rss)
		set(e, "host_threads", threads)
		set(e, "host_fds", fds)
	}
	return s
}

func (s sample) line() string {
	keys := make([]string, 0, len(s.values))
	for _, sr := range series {
		for _, eng := range []string{"sqlite", "postgres"} {
			if v, ok := s.values[eng+"."+sr.key]; ok {
				keys = append(keys, fmt.Sprintf("%s.%s=%.4g", eng, sr.key, v))
			}
		}
	}
	return fmt.Sprintf("%6s %s", s.at.Round(time.Second), strings.Join(keys, " "))
}

// dbSize is the database's size and its WAL's, in bytes.
func dbSize(ctx context.Context, url string) (db, wal int64) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		return fileSize(path), fileSize(path + "-wal")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return -1, -1
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&db); err != nil {
		db = -1
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(size), 0)::bigint FROM pg_ls_waldir()`).Scan(&wal); err != nil {
		wal = -1
	}
	return db, wal
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		return -1
	}
	return fi.Size()
}

func mib(n int64) float64 {
	if n < 0 {
		return -1
	}
	return float64(n) / (1 << 20)
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
