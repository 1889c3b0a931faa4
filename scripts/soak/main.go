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
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/scripts/internal/rig"
)

const secret = "soak-secret-of-some-length"

// providers are the sources each host has: the source name is the
// provider's.
var providers = []string{"github", "stripe", "slack"}

func main() {
	short := flag.Bool("short", false, "a few minutes instead of an hour")
	runFor := flag.Duration("for", time.Hour, "how long the traffic runs")
	every := flag.Duration("every", time.Minute, "how often to sample")
	rate := flag.Float64("rate", 20, "webhooks a second, over both clouds")
	out := flag.String("out", "", "directory for SOAK.md and soak.svg (default: the module root; with -short, none)")
	keep := flag.Bool("keep", false, "keep the working directory")
	flag.Parse()
	if *short {
		if !isSet("for") {
			*runFor = 4 * time.Minute
		}
		if !isSet("every") {
			*every = 15 * time.Second
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{short: *short, runFor: *runFor, every: *every, rate: *rate, out: *out, keep: *keep}); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type config struct {
	short  bool
	runFor time.Duration
	every  time.Duration
	rate   float64
	out    string
	keep   bool
}

// engine is one cloud with its hosts.
type engine struct {
	name  string
	dbURL string
	cloud *rig.Cloud
	hosts []*rig.Host
	ids   []string // host ids, as hosts
}

func run(ctx context.Context, cfg config) error {
	root, err := rig.RepoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "relay-soak-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Printf("working directory: %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	if cfg.out == "" && !cfg.short {
		cfg.out = root
	}
	bins, err := rig.Build(ctx, root, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	started := time.Now()

	rcv := newReceiver()
	r, err := rig.StartReceiver(rig.ReceiverOptions{Answer: rcv.answer})
	if err != nil {
		return err
	}
	defer r.Close()

	retain := "2m"
	if cfg.short {
		retain = "1m"
	}
	// The load is steady, not abusive: above the default 100 a minute per
	// host.
	cloudEnv := []string{"RELAY_RETAIN_ACKED=" + retain, "RELAY_RETAIN_DLQ=" + retain, "RELAY_LOG_LEVEL=info",
		"RELAY_RATE_LIMIT_PER_MIN=6000"}
	var engines []*engine
	defer func() {
		for _, e := range engines {
			for _, h := range e.hosts {
				h.Close()
			}
			if e.cloud != nil {
				e.cloud.Stop(15 * time.Second)
			}
		}
	}()

	sqliteURL := "sqlite:" + filepath.Join(work, "sqlite", "cloud.db")
	engines = append(engines, &engine{name: "sqlite", dbURL: sqliteURL})
	pgDir, err := os.MkdirTemp("", "relay-soak-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgDir)
	os.Chmod(pgDir, 0o755)
	pg, err := rig.StartPostgres(ctx, root, pgDir, true)
	if err != nil {
		fmt.Printf("postgres: not run (%v)\n", firstLine(err))
	} else {
		defer pg.Stop()
		url, err := pg.NewDatabase(ctx, "soak")
		if err != nil {
			return err
		}
		engines = append(engines, &engine{name: "postgres", dbURL: url})
	}
	for _, e := range engines {
		dir := filepath.Join(work, e.name)
		e.cloud, err = rig.StartCloud(ctx, rig.CloudConfig{Bin: bins.Cloud, DatabaseURL: e.dbURL, DataDir: dir, Env: cloudEnv})
		if err != nil {
			return fmt.Errorf("%s cloud: %w", e.name, err)
		}
		for i := range 3 {
			h, err := e.cloud.CreateHost(ctx, fmt.Sprintf("%s-host-%d", e.name, i))
			if err != nil {
				return err
			}
			webhooks := map[string]any{}
			for _, p := range providers {
				// Three attempts a few seconds apart: a doomed webhook is
				// dead-lettered within seconds.
				spec := map[string]any{"provider": p, "secrets": []string{secret}, "retry_schedule_s": []int{0, 2, 3}}
				if p == "github" {
					// The soak sends each payload under many delivery ids:
					// the replay guard would hold all but the first.
					spec["options"] = map[string]string{"replay_guard": "off"}
				}
				if err := e.cloud.PutSource(ctx, h.ID, p, spec); err != nil {
					return err
				}
				webhooks[p] = map[string]any{"enabled": true, "forward": r.URL, "parallel": true}
			}
			host, err := rig.StartHost(ctx, rig.HostConfig{Bin: bins.Host, CloudURL: e.cloud.Admin.URL, ClaimCode: h.ClaimCode,
				StateDir: filepath.Join(dir, fmt.Sprintf("host-%d", i)), Config: map[string]any{"webhooks": webhooks, "heartbeat_interval_s": 5}})
			if err != nil {
				return err
			}
			e.hosts = append(e.hosts, host)
			e.ids = append(e.ids, h.ID)
		}
	}
	fmt.Printf("soak: %d clouds (%s), %d hosts each, %.0f webhooks/s for %s, sampled every %s\n",
		len(engines), engineNames(engines), 3, cfg.rate, cfg.runFor, cfg.every)

	// The load and the faults run until loadCtx ends.
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.runFor)
	defer stopLoad()
	snd := &sender{engines: engines, rate: cfg.rate}
	var wg sync.WaitGroup
	wg.Go(func() { snd.run(loadCtx) })
	restartEvery := 5 * time.Minute
	if cfg.short {
		restartEvery = 45 * time.Second
	}
	var restarts int
	wg.Go(func() { restarts = restartHosts(loadCtx, engines, restartEvery) })
	var retried int
	dlqEvery := 30 * time.Second
	if cfg.short {
		dlqEvery = 10 * time.Second
	}
	wg.Go(func() { retried = retryDeadLetters(loadCtx, engines, rcv, dlqEvery) })

	var samples []sample
	tick := time.NewTicker(cfg.every)
	for done := false; !done; {
		samples = append(samples, takeSample(ctx, engines, time.Since(started)))
		fmt.Println(samples[len(samples)-1].line())
		select {
		case <-loadCtx.Done():
			done = true
		case <-tick.C:
		}
	}
	tick.Stop()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// The end: the app is fixed; what is dead-lettered is retried by hand,
	// and everything drains.
	rcv.fixAll()
	left, err := drain(ctx, engines, rcv)
	if err != nil {
		return err
	}
	sent, accepted, gaveUp, why := snd.totals()
	rep := &report{cfg: cfg, engines: engineNames(engines), samples: samples, started: started,
		sent: sent, accepted: accepted, gaveUp: gaveUp, gaveUpWhy: why, restarts: restarts, retriedByHand: retried + rcv.handRetries(),
		load: loadAverage()}
	rep.check(snd.acceptedKeys(), rcv.successes(), left)
	fmt.Print(rep.markdown())
	if cfg.out != "" {
		if err := rep.write(cfg.out); err != nil {
			return err
		}
		fmt.Printf("written: %s, %s\n", filepath.Join(cfg.out, "SOAK.md"), filepath.Join(cfg.out, "soak.svg"))
	}
	if len(rep.failures) > 0 {
		return fmt.Errorf("%d checks failed", len(rep.failures))
	}
	return nil
}

func engineNames(es []*engine) string {
	var n []string
	for _, e := range es {
		n = append(n, e.name)
	}
	return strings.Join(n, ", ")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// receiver decides the local app's answers and counts its successes.
type receiver struct {
	mu      sync.Mutex
	ok      map[string]int  // Idempotency-Key → 200 answers
	fixed   map[string]bool // doomed deliveries the app now accepts
	allFix  bool
	byHands int
}

func newReceiver() *receiver {
	return &receiver{ok: map[string]int{}, fixed: map[string]bool{}}
}

// answer: a "flaky" event fails its first attempt, a "doomed" one every
// attempt until fixed; the rest succeed.
func (rc *receiver) answer(_ *http.Request, key string, n int) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case strings.Contains(key, "doomed") && !rc.fixed[key] && !rc.allFix:
		return http.StatusInternalServerError
	case strings.Contains(key, "flaky") && n == 1:
		return http.StatusServiceUnavailable
	}
	rc.ok[key]++
	return http.StatusOK
}

func (rc *receiver) fix(key string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.fixed[key] = true
}

func (rc *receiver) fixAll() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.allFix = true
}

func (rc *receiver) countHandRetry() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.byHands++
}

func (rc *receiver) handRetries() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.byHands
}

func (rc *receiver) successes() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int, len(rc.ok))
	for k, v := range rc.ok {
		out[k] = v
	}
	return out
}

// sender posts signed webhooks at a steady rate, as providers would: a
// non-2xx answer or a transport error is retried (same event) a few times.
type sender struct {
	engines []*engine
	rate    float64

	mu       sync.Mutex
	sent     int
	accepted map[string]bool // delivery ids answered 2xx
	gaveUp   int
	why      map[string]int // the last answer of those given up
}

func (s *sender) run(ctx context.Context) {
	s.accepted, s.why = map[string]bool{}, map[string]int{}
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(float64(time.Second) / s.rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e := s.engines[i%len(s.engines)]
		hi := (i / len(s.engines)) % len(e.ids)
		provider := providers[(i/len(s.engines)/len(e.ids))%len(providers)]
		kind := "ok"
		switch x := rng.IntN(100); {
		case x < 1:
			kind = "doomed"
		case x < 6:
			kind = "flaky"
		}
		id := fmt.Sprintf("soak-%s-%d", kind, i)
		wg.Go(func() { s.send(ctx, client, e, e.ids[hi], provider, id) })
	}
}

func (s *sender) send(ctx context.Context, client *http.Client, e *engine, hostID, provider, id string) {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	last := ""
	for try := range 5 {
		if try > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		var body []byte
		var header http.Header
		now := time.Now()
		switch provider {
		case "github":
			w := rig.SignGitHub(secret, "push", id, []byte(fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/app"}}`, id)))
			body, header = w.Body, w.Header
		case "stripe":
			body, header = rig.StripeWebhook(secret, id, now)
		case "slack":
			body, header = rig.SlackWebhook(secret, id, now)
		}
		// Sent even after the load ends: a provider does not drop a webhook
		// mid-retry.
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), "POST", rig.WebhookURL(e.cloud.Admin.URL, hostID, provider), strings.NewReader(string(body)))
		if err != nil {
			break
		}
		req.Header = header
		resp, err := client.Do(req)
		if err != nil {
			last = "transport error"
			continue
		}
		last = resp.Status
		var ans struct {
			DeliveryID string `json:"delivery_id"`
		}
		decodeJSON(resp, &ans)
		if resp.StatusCode/100 == 2 && ans.DeliveryID != "" {
			s.mu.Lock()
			s.accepted[ans.DeliveryID] = true
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	s.gaveUp++
	s.why[last]++
	s.mu.Unlock()
}

func (s *sender) totals() (sent, accepted, gaveUp int, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []string
	for k, v := range s.why {
		w = append(w, fmt.Sprintf("%s: %d", k, v))
	}
	return s.sent, len(s.accepted), s.gaveUp, strings.Join(w, ", ")
}

func (s *sender) acceptedKeys() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// restartHosts restarts one host every interval, round robin, gracefully
// (SIGTERM, then a fresh start on the same state), and returns how many.
func restartHosts(ctx context.Context, engines []*engine, every time.Duration) int {
	n := 0
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(every):
		}
		e := engines[i%len(engines)]
		h := e.hosts[(i/len(engines))%len(e.hosts)]
		if err := h.Stop(15 * time.Second); err != nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
		}
		if err := h.Start(); err != nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
			continue
		}
		if err := h.WaitReady(ctx, 30*time.Second); err != nil && ctx.Err() == nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
		}
		n++
	}
}

// retryDeadLetters retries every dead-lettered delivery by hand each
// interval, once the app accepts it, and returns how many.
func retryDeadLetters(ctx context.Context, engines []*engine, rc *receiver, every time.Duration) int {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(every):
		}
		n += retryDLQ(ctx, engines, rc)
	}
}

func retryDLQ(ctx context.Context, engines []*engine, rc *receiver) int {
	n := 0
	for _, e := range engines {
		for _, id := range e.ids {
			dead, err := e.cloud.Deliveries(ctx, id, "dlq")
			if err != nil {
				continue
			}
			for _, d := range dead {
				rc.fix(d.DeliveryID)
				if err := e.cloud.Do(ctx, "POST", "/api/hosts/"+id+"/webhooks/"+d.DeliveryID+"/retry", nil, nil); err == nil {
					n++
				}
			}
		}
	}
	return n
}

// drain waits (up to 5 min) until no delivery is left but acked ones,
// retrying dead letters by hand meanwhile, and returns what is left.
func drain(ctx context.Context, engines []*engine, rc *receiver) (map[string]int, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		left := map[string]int{}
		for _, e := range engines {
			for _, id := range e.ids {
				counts, err := e.cloud.Counts(ctx, id)
				if err != nil {
					return nil, err
				}
				for st, c := range counts {
					if st != "acked" && c > 0 {
						left[e.name+" "+st] += c
					}
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left, nil
		}
		for range retryDLQ(ctx, engines, rc) {
			rc.countHandRetry()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

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
