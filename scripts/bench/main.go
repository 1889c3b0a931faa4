// Command bench measures the relay with real processes: intake throughput
// and latency, latency under a steady open-loop load, how fast a host drains
// a backlog (and, beside it, what forwarding alone costs on the machine),
// end-to-end latency to the local app, the cost of idle hosts and
// peak memory, and the same for groups of hosts (a fanout group's intake, an
// any group's drain, an any group's member killed while it holds work),
// each on Postgres (durable: fsync and synchronous_commit on)
// and on embedded SQLite. It prints a markdown report and writes it to
// BENCHMARKS.md (see -out); a -quick run only prints it, unless -out says
// where to write it.
//
//	go run ./scripts/bench                         # everything (make bench)
//	go run ./scripts/bench -quick                  # 2 s runs, a small drain: a smoke test (make bench BENCH_FLAGS=-quick)
//	go run ./scripts/bench -engines sqlite -scenarios intake,e2e -out -
//	go run ./scripts/bench -quick -engines sqlite -scenarios intake,group-intake,drain,group-drain,group-failover
//	go run ./scripts/bench -scenarios scale -scale 0,1000000 -engines sqlite,postgres
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// config is the command line.
type config struct {
	engines   []string
	scenarios []string
	out       string
	keep      bool
	quick     bool
	ids       string
	payloads  string
	dup       float64
	bins      string
	// pgSet: the bench's Postgres server settings over its defaults,
	// "name=value,…".
	pgSet string
	// sqliteCacheMB: the SQLite page cache the clouds and the bench's own
	// opens of their stores are given (0: the cloud's default).
	sqliteCacheMB int

	warmup         time.Duration
	intakeConc     []int
	intakeDuration time.Duration
	latencyRates   []int
	latencyDur     time.Duration
	latencyMaxIn   int
	drainN         int
	drainConc      int
	drainWorkers   int
	e2eRates       []float64
	transports     []string // the host transports of the drain, end-to-end and idle runs
	e2eModes       []string
	e2eWorkers     int
	e2eDuration    time.Duration
	idleHosts      int
	idleInterval   time.Duration
	idleWait       int
	idleDuration   time.Duration

	// The group scenarios (groups.go): group-intake at intakeConc,
	// group-drain of drainN, group-failover under groupRate webhooks/s for
	// groupFailoverDur on a cloud with groupLease and groupLateAfter (0:
	// the cloud's defaults).
	groupRate        float64
	groupFailoverDur time.Duration
	groupLease       time.Duration
	groupLateAfter   time.Duration

	// The scale scenario (scale.go): the store filled to each of
	// scaleSizes deliveries, each read timed over scaleReads calls.
	scaleSizes []int
	scaleReads int
	// scaleRetention: how long the retention phase runs (0: not at all).
	scaleRetention time.Duration
	// scaleSustain: how long intake runs on after its measured run, in
	// windows of scaleWindow (0: not at all).
	scaleSustain time.Duration
	// scaleBase: on Postgres, the deliveries the loader writes at a size
	// above it; copies of them make up the rest (copies.go). 0: all.
	scaleBase int
	// scaleStore: a directory holding a SQLite store kept from a run
	// (-keep), measured instead of a fill ("": fill).
	scaleStore string
}

var allScenarios = []string{"intake", "latency", "drain", "e2e", "idle", "group-intake", "group-drain", "group-failover", "scale"}

func main() {
	runAsClient(os.Args)
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// runAsClient runs the bench binary as one of the floors' clients, when
// args name one, and exits.
func runAsClient(args []string) {
	if len(args) < 2 {
		return
	}
	client := map[string]func([]string) error{floorClientArg: floorClient, hopFloorClientArg: hopFloorClient}[args[1]]
	if client == nil {
		return
	}
	if err := client(args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	var engines, scenarios, conc, rates, modes, e2eRates, transports, sizes string
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.StringVar(&engines, "engines", "postgres,sqlite", "storage engines to measure, comma-separated: postgres, sqlite")
	fs.StringVar(&scenarios, "scenarios", strings.Join(allScenarios, ","), "scenarios to run, comma-separated: "+strings.Join(allScenarios, ", "))
	fs.StringVar(&c.out, "out", "BENCHMARKS.md", "report file, relative to the module root; - prints to stdout only (the default with -quick)")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (logs, databases, the Postgres server's data directory, stopped) instead of removing it")
	fs.BoolVar(&c.quick, "quick", false, "short runs for a smoke test: 2 s runs, 5,000-delivery drain, 200 idle hosts for 10 s, a 10 s group failover with RELAY_LEASE=10s and RELAY_HOST_LATE_AFTER=5s, scale at 0 and 5,000 deliveries with 5 calls of each read and a 20 s retention phase (explicit flags still win)")
	fs.StringVar(&c.ids, "ids", "random", "event ids: random, in each provider's shape (GitHub's UUIDs, Stripe's evt_…), or counter (a run prefix and a number, as the bench sent before: it flatters an engine whose dedupe index then grows at one end)")
	fs.StringVar(&c.payloads, "payloads", "mix", "bodies: mix (real GitHub and Stripe payloads of 0.9–28 KB and a 300 KB push, by weight; see scripts/bench/mix.go) or installation (one 3,329-byte GitHub webhook, as the bench sent before)")
	fs.StringVar(&c.pgSet, "pg-set", "", "Postgres server settings to measure with instead of its defaults, comma-separated name=value (e.g. wal_compression=lz4,max_wal_size=8GB,shared_buffers=2GB), written to its configuration before it starts")
	fs.IntVar(&c.sqliteCacheMB, "sqlite-cache-mb", 0, "SQLite's page cache in MiB for every cloud (RELAY_SQLITE_CACHE_MB) and the bench's own opens of their stores (the scale scenario's loader and alert timing); 0: the cloud's default")
	fs.StringVar(&c.bins, "bins", "", "directory holding prebuilt cloud and host binaries to measure instead of building the module's (to compare two builds with the same bench)")
	fs.Float64Var(&c.dup, "dup", 0, "share of requests (0–0.5) that replay a webhook already accepted, as a provider retries one")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before each intake, latency and end-to-end run")
	fs.StringVar(&conc, "intake-conc", "16,64,256", "intake: concurrent closed-loop senders, one run each")
	fs.DurationVar(&c.intakeDuration, "intake-duration", 10*time.Second, "intake: length of each run")
	fs.StringVar(&rates, "latency-rates", "1000,2000", "latency: open-loop rates (webhooks/s), one run each")
	fs.DurationVar(&c.latencyDur, "latency-duration", 10*time.Second, "latency: length of each run")
	fs.IntVar(&c.latencyMaxIn, "latency-max-inflight", 512, "latency: most requests outstanding at once (more shows as latency)")
	fs.IntVar(&c.drainN, "drain", 100000, "drain and group-drain: deliveries queued before the host (the group's members) starts")
	fs.IntVar(&c.drainConc, "drain-conc", 64, "drain: concurrent senders while queuing")
	fs.IntVar(&c.drainWorkers, "drain-workers", 128, "drain: the host's workers (source parallel: true)")
	fs.StringVar(&e2eRates, "e2e-rate", "100,1000", "end to end: webhooks/s, one run each")
	fs.StringVar(&transports, "transports", "heartbeat,websocket", "drain, end to end, idle, group-drain and group-failover: the host transports, one run each: heartbeat (long poll), websocket")
	fs.StringVar(&modes, "e2e-modes", "sequential,parallel", "end to end: how the host runs the source, one run each: sequential (the default, one at a time in order), parallel (parallel: true)")
	fs.IntVar(&c.e2eWorkers, "e2e-workers", 16, "end to end: the host's workers in parallel mode")
	fs.DurationVar(&c.e2eDuration, "e2e-duration", 20*time.Second, "end to end: length of the run")
	fs.IntVar(&c.idleHosts, "idle-hosts", 2000, "idle: simulated hosts")
	fs.DurationVar(&c.idleInterval, "idle-interval", 30*time.Second, "idle: each host's heartbeat interval")
	fs.IntVar(&c.idleWait, "idle-wait", 25, "idle: wait_s of each heartbeat (a real idle host long-polls with 25); 0 for plain heartbeats")
	fs.DurationVar(&c.idleDuration, "idle-duration", 60*time.Second, "idle: how long the cloud's CPU is measured")
	fs.Float64Var(&c.groupRate, "group-rate", 50, "group-failover: webhooks/s to the group while its member is killed")
	fs.DurationVar(&c.groupFailoverDur, "group-failover-duration", 30*time.Second, "group-failover: length of the traffic (the member is killed a third of the way in)")
	fs.DurationVar(&c.groupLease, "group-lease", 0, "group-failover: the cloud's RELAY_LEASE (0: its default, 2m), which bounds a long-poll member's hand-over")
	fs.DurationVar(&c.groupLateAfter, "group-late-after", 0, "group-failover: the cloud's RELAY_HOST_LATE_AFTER (0: its default, 1m; below 3m, its RELAY_HOST_OFFLINE_AFTER)")
	fs.StringVar(&sizes, "scale", "0,100000", "scale: the stored deliveries of each run, comma-separated (0 and more); 1000000,5000000,10000000 are the issue's sizes, which take long and need disk: ~7 KB a delivery on either engine")
	fs.DurationVar(&c.scaleSustain, "scale-sustain", 0, "scale: after the intake run, intake at the same concurrency for this long more, timed in windows of 30 s: whether a filled store's intake rate recovers as its checkpoint cycle goes on (0 skips it)")
	fs.IntVar(&c.scaleReads, "scale-reads", 30, "scale: calls of each read, one after the other")
	fs.StringVar(&c.scaleStore, "scale-store", "", "scale, SQLite: measure the store kept in this directory (its cloud.db, and the keys of the cloud that wrote it in cloud/, as -keep leaves a run's directory) at each size above 0 instead of filling one: linked, not copied, so the phases change it; no backup phase")
	fs.IntVar(&c.scaleBase, "scale-base", 0, "scale, Postgres: at a size above this the loader writes this many deliveries through the cloud's code and copies of them made in SQL make up the rest, each with its own ids and times (scripts/bench/copies.go); the size must be a multiple of it; 0: the loader writes all (800–1,700/s: 10,000,000 take two to three hours)")
	fs.DurationVar(&c.scaleRetention, "scale-retention", 3*time.Minute, "scale: how long the last phase runs: the cloud keeping acked and dead-lettered deliveries 2 minutes, so the filled week is pruned while intake runs and then each minute what intake brought (0 skips it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./scripts/bench [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		quick := map[string]func(){
			"warmup":           func() { c.warmup = 300 * time.Millisecond },
			"intake-duration":  func() { c.intakeDuration = 2 * time.Second },
			"latency-duration": func() { c.latencyDur = 2 * time.Second },
			"drain":            func() { c.drainN = 5000 },
			"e2e-duration":     func() { c.e2eDuration = 5 * time.Second },
			"idle-hosts":       func() { c.idleHosts = 200 },
			"idle-interval":    func() { c.idleInterval = 5 * time.Second },
			"idle-wait":        func() { c.idleWait = 4 },
			"idle-duration":    func() { c.idleDuration = 10 * time.Second },
			// A long-poll member's hand-over waits for these: the
			// defaults (2m, 1m) would make a smoke run minutes long.
			"group-failover-duration": func() { c.groupFailoverDur = 10 * time.Second },
			"group-lease":             func() { c.groupLease = 10 * time.Second },
			"group-late-after":        func() { c.groupLateAfter = 5 * time.Second },
			"scale":                   func() { sizes = "0,5000" },
			"scale-reads":             func() { c.scaleReads = 5 },
			"scale-retention":         func() { c.scaleRetention = 20 * time.Second },
			"scale-sustain":           func() { c.scaleSustain = 4 * time.Second },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
		// A smoke run's figures are not the committed ones.
		if !set["out"] {
			c.out = "-"
		}
	}
	c.engines = splitList(engines)
	for _, e := range c.engines {
		if e != "postgres" && e != "sqlite" {
			return nil, fmt.Errorf("-engines: unknown engine %q (postgres, sqlite)", e)
		}
	}
	c.scenarios = splitList(scenarios)
	for _, s := range c.scenarios {
		if !slices.Contains(allScenarios, s) {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (%s)", s, strings.Join(allScenarios, ", "))
		}
	}
	c.transports = splitList(transports)
	for _, tr := range c.transports {
		if tr != "heartbeat" && tr != "websocket" {
			return nil, fmt.Errorf("-transports: unknown transport %q (heartbeat, websocket)", tr)
		}
	}
	for _, r := range splitList(e2eRates) {
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-e2e-rate: %q is not a positive number", r)
		}
		c.e2eRates = append(c.e2eRates, v)
	}
	c.e2eModes = splitList(modes)
	for _, m := range c.e2eModes {
		if m != "sequential" && m != "parallel" {
			return nil, fmt.Errorf("-e2e-modes: unknown mode %q (sequential, parallel)", m)
		}
	}
	for _, v := range splitList(sizes) {
		n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-scale: %q is not a number of deliveries", v)
		}
		c.scaleSizes = append(c.scaleSizes, n)
	}
	if c.scaleReads < 1 {
		return nil, fmt.Errorf("-scale-reads: must be at least 1")
	}
	if c.scaleStore != "" && !slices.Equal(c.engines, []string{"sqlite"}) {
		return nil, fmt.Errorf("-scale-store: a SQLite store, measured with -engines sqlite only")
	}
	var err error
	if c.intakeConc, err = intList("intake-conc", conc); err != nil {
		return nil, err
	}
	if c.latencyRates, err = intList("latency-rates", rates); err != nil {
		return nil, err
	}
	if c.dup < 0 || c.dup > 0.5 || c.dup != c.dup {
		return nil, fmt.Errorf("-dup: must be 0–0.5")
	}
	if _, err := newIDs(c.ids); err != nil {
		return nil, err
	}
	if err := checkMix(c.payloads); err != nil {
		return nil, err
	}
	if c.drainWorkers < 2 || c.drainWorkers > 256 {
		return nil, fmt.Errorf("-drain-workers: must be 2–256 (the host's limit)")
	}
	if c.groupRate <= 0 || c.groupFailoverDur <= 0 {
		return nil, fmt.Errorf("-group-rate and -group-failover-duration: must be positive")
	}
	if c.groupLease < 0 || c.groupLateAfter < 0 || c.groupLateAfter >= 3*time.Minute {
		return nil, fmt.Errorf("-group-lease, -group-late-after: must not be negative, and -group-late-after below 3m (the cloud's RELAY_HOST_OFFLINE_AFTER)")
	}
	if c.idleWait > 25 || c.idleWait < 0 {
		return nil, fmt.Errorf("-idle-wait: must be 0–25 (the cloud holds at most 25 s)")
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive number", name, p)
		}
		out = append(out, n)
	}
	return out, nil
}

func mainErr() error {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, work, err := rig.WorkDir("relay-bench-")
	if err != nil {
		return err
	}
	b := &bench{ctx: ctx, cfg: cfg, root: root, work: work, started: time.Now()}
	if cfg.sqliteCacheMB > 0 {
		cloudEnv = append(cloudEnv, fmt.Sprintf("RELAY_SQLITE_CACHE_MB=%d", cfg.sqliteCacheMB))
	}
	if b.mix, err = newMix(cfg.payloads); err != nil {
		return err
	}
	if b.ids, err = newIDs(cfg.ids); err != nil {
		return err
	}
	defer func() {
		if cfg.keep || b.failed {
			logf("work directory kept: %s", work)
		} else {
			os.RemoveAll(work)
		}
	}()

	if cfg.bins != "" {
		dir, err := filepath.Abs(cfg.bins)
		if err != nil {
			return err
		}
		b.bins = &rig.Bins{Dir: dir, Cloud: filepath.Join(dir, "cloud"), Host: filepath.Join(dir, "host")}
		b.source = "binaries from " + dir + " (the bench at " + revision(root) + ")"
		logf("binaries from %s", dir)
	} else {
		logf("building the binaries")
		// Read as they are built: the tree may move on during a long run.
		b.source = revision(root)
		if b.bins, err = rig.Build(ctx, root, filepath.Join(work, "bin")); err != nil {
			return err
		}
	}
	if slices.Contains(cfg.engines, "postgres") {
		logf("starting a durable Postgres (fsync on)")
		var settings []string
		if cfg.pgSet != "" {
			settings = strings.Split(cfg.pgSet, ",")
		}
		if b.pg, err = rig.StartPostgres(ctx, root, filepath.Join(work, "pg"), true, settings...); err != nil {
			return err
		}
		defer func() {
			stop := b.pg.Stop
			if cfg.keep {
				stop = b.pg.StopKeep
			}
			if err := stop(); err != nil {
				logf("%v", err)
			} else if cfg.keep {
				logf("Postgres's data directory kept, the server stopped: scripts/pgtest.sh start %s starts it again (its URL in %s)",
					b.pg.Dir, filepath.Join(b.pg.Dir, "url"))
			}
		}()
	}

	rep := &report{}
	for _, engine := range cfg.engines {
		for _, sc := range cfg.scenarios {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("== %s: %s", engine, sc)
			switch sc {
			case "intake":
				for _, conc := range cfg.intakeConc {
					rep.intake = append(rep.intake, b.intake(engine, conc))
				}
			case "latency":
				for _, rate := range cfg.latencyRates {
					rep.latency = append(rep.latency, b.latency(engine, rate))
				}
			case "drain":
				for _, tr := range cfg.transports {
					rep.drain = append(rep.drain, b.drain(engine, tr))
				}
			case "e2e":
				for _, rate := range cfg.e2eRates {
					for _, mode := range cfg.e2eModes {
						for _, tr := range cfg.transports {
							rep.e2e = append(rep.e2e, b.e2e(engine, mode, tr, rate))
						}
					}
				}
			case "idle":
				for _, tr := range cfg.transports {
					rep.idle = append(rep.idle, b.idle(engine, tr))
				}
			case "group-intake":
				for _, conc := range cfg.intakeConc {
					rep.groupIntake = append(rep.groupIntake, b.groupIntake(engine, conc))
				}
			case "group-drain":
				for _, tr := range cfg.transports {
					rep.groupDrain = append(rep.groupDrain, b.groupDrain(engine, tr))
				}
			case "group-failover":
				for _, tr := range cfg.transports {
					rep.groupFailover = append(rep.groupFailover, b.groupFailover(engine, tr))
				}
			case "scale":
				for _, n := range cfg.scaleSizes {
					rep.scale = append(rep.scale, b.scale(engine, n))
				}
			}
		}
	}
	if slices.Contains(cfg.scenarios, "drain") && ctx.Err() == nil {
		row := b.forwardFloor()
		rep.floor = &row
	}
	if slices.Contains(cfg.scenarios, "e2e") && ctx.Err() == nil {
		row := b.latencyFloor(slices.Min(cfg.e2eRates))
		rep.latencyFloor = &row
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	md := rep.markdown(b)
	fmt.Print(md)
	if cfg.out != "-" {
		path := cfg.out
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := os.WriteFile(path, []byte(md+keptSections(path)), 0o644); err != nil {
			return err
		}
		logf("wrote %s (%s in all)", path, time.Since(b.started).Round(time.Second))
	}
	return nil
}

// keptMarker starts the part of the report that other benchmarks write
// (the alert evaluator's cost, page render times, …): make bench keeps it.
const keptMarker = "<!-- Measured by other benchmarks, each with its command: make bench keeps what follows. -->"

// keptSections is the part of the existing report from keptMarker on, or
// "" when there is none.
func keptSections(path string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := strings.Index(string(old), keptMarker)
	if i < 0 {
		return ""
	}
	return "\n" + string(old[i:])
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
