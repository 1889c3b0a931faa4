package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// sample is one reading of every series, per engine, and of the
// transport each host was on.
type sample struct {
	at     time.Duration // since the start
	values map[string]float64
	links  map[string]string // host name → its transport in use (websocket, heartbeat, not connected, down)
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
	{"group_waiting", "groups waiting"},
	{"host_rss", "hosts RSS MiB"},
	{"host_threads", "hosts threads"},
	{"host_fds", "hosts fds"},
}

func takeSample(ctx context.Context, engines []*engine, at time.Duration) sample {
	s := sample{at: at, values: map[string]float64{}, links: map[string]string{}}
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
		if w, err := metricSum(ctx, e, "relay_group_waiting_deliveries"); err == nil {
			set(e, "group_waiting", w)
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
			s.links[e.names[i]] = "down"
			if l, err := readLink(ctx, e.hosts[i]); err == nil {
				s.links[e.names[i]] = l.inUse
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

// metricSum is the sum of a labelled series (name{…} v) over its labels,
// from the cloud's /metrics; 0 when it has none.
func metricSum(ctx context.Context, e *engine, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", e.cloud.Admin.URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.cloud.Admin.Token)
	resp, err := e.cloud.Admin.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+"{")
		if !ok {
			continue
		}
		_, v, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			sum += x
		}
	}
	return sum, sc.Err()
}

// link is a host's connection to the cloud as its page shows it.
type link struct {
	inUse, configured  string // the transport carrying webhooks ("not connected" when none), the one asked for
	sockets, fallbacks int    // sockets opened and falls back to heartbeats since the host started
}

var (
	transportRE = regexp.MustCompile(`<strong id="transport">([^<]*)</strong>.*?\(configured: ([a-z]+)`)
	socketsRE   = regexp.MustCompile(`Sockets opened</dt><dd>(\d+) \(\d+ reconnects\) · fallbacks to heartbeats: (\d+)`)
)

// readLink reads the host's page (its local API's /) for the transport it
// is on.
func readLink(ctx context.Context, h *rig.Host) (link, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", h.LocalURL+"/", nil)
	if err != nil {
		return link{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return link{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return link{}, err
	}
	m := transportRE.FindSubmatch(b)
	if m == nil {
		return link{}, fmt.Errorf("host page: no transport (status %d)", resp.StatusCode)
	}
	l := link{inUse: string(m[1]), configured: string(m[2])}
	if m := socketsRE.FindSubmatch(b); m != nil {
		l.sockets, _ = strconv.Atoi(string(m[1]))
		l.fallbacks, _ = strconv.Atoi(string(m[2]))
	}
	return l, nil
}

// logCount counts the lines of the host's log (every start of it, appended)
// that hold s.
func logCount(h *rig.Host, s string) int {
	b, err := os.ReadFile(h.LogPath)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte(s))
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
