// Command soak is the relay's long run (`make soak`): about an hour of
// steady signed traffic, with nothing allowed to grow.
//
// Two clouds run side by side, one on SQLite and one on a throwaway
// Postgres, each with three hosts; every host has a GitHub, a Stripe and a
// Slack source forwarding to one local receiver, each host to a path of
// its own (/hook/HOST_ID). Two hosts of each cloud take their webhooks over
// the socket (transport auto, the hosts' default), the third over the
// long poll (transport heartbeat). Beside them each cloud has two groups
// of the same three hosts, each with a GitHub source: one in fanout mode
// (every member runs every webhook), one in any mode (one member runs
// it). A sender posts signed webhooks at a steady rate, spread over the
// clouds, the hosts' own URLs and providers (eight in ten) and the groups'
// URLs (one in ten each), and retries a non-2xx answer as a provider
// would. Along the way:
//
//   - a host is restarted now and then (SIGTERM, then started again), in
//     turn on both transports: its groups' any webhooks go to the other
//     members meanwhile, its fanout ones wait for it;
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
// descriptors (summed over the three), the groups' any deliveries waiting
// for a member (relay_group_waiting_deliveries), and the transport each
// host is on (its page, /). It writes the samples as a table (SOAK.md) and
// a small SVG plot of each series (soak.svg) into -out.
//
// It passes when:
//
//   - every webhook was answered 2xx within five tries (the sender's);
//   - every series is flat after warm-up: the mean of its last quarter of
//     samples is at most 10 % above the mean of its second quarter, plus a
//     small absolute allowance per series (allowance, below) so that a
//     series near zero is not failed for noise;
//   - every webhook answered 2xx at a host's URL was handled exactly once,
//     by that host: the receiver answered 200 to exactly one forward of it
//     (its Idempotency-Key), and to none that was not answered 2xx;
//   - every webhook answered 2xx at a fanout group's URL was handled
//     exactly once by each member (one 200 per member, each under its own
//     Idempotency-Key, with the group's X-Relay-Group);
//   - every webhook answered 2xx at an any group's URL was handled at
//     least once by a member, and more than once only under its one
//     Idempotency-Key (a member that ran it and went away before its ack
//     leaves it to another: the report counts these second runs);
//   - each host carried its webhooks on its transport: a socket host was
//     never seen on heartbeats, the long-poll host never opened a socket;
//   - nothing is left that should not be: once the sender stops and the
//     last dead letters are retried, no delivery is queued, retrying,
//     delivering, delivered or dead-lettered on either cloud, of the
//     hosts' own or of a group's.
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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

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

// engine is one cloud with its hosts and groups.
type engine struct {
	name       string
	dbURL      string
	cloud      *rig.Cloud
	hosts      []*rig.Host
	ids        []string // host ids, as hosts
	names      []string // host names, as hosts
	transports []string // the transport each host is configured with, as hosts
	fanout     *group   // of every host, its GitHub source in fanout mode
	any        *group   // of every host, its GitHub source in any mode
}

// hostTransports are the transports of each cloud's hosts, in order: the
// socket (auto, the hosts' default) on all but the last, which long-polls.
var hostTransports = []string{"auto", "auto", "heartbeat"}

func run(ctx context.Context, cfg config) error {
	root, work, err := rig.WorkDir("relay-soak-")
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
		for i, transport := range hostTransports {
			name := fmt.Sprintf("%s-host-%d", e.name, i)
			h, err := e.cloud.CreateHost(ctx, name)
			if err != nil {
				return err
			}
			webhooks := map[string]any{}
			for _, p := range providers {
				// Three attempts a few seconds apart: a doomed webhook is
				// dead-lettered within seconds.
				spec := map[string]any{"provider": p, "secrets": []string{secret}, "retry_schedule_s": []int{0, 2, 3}}
				if p == "github" {
					spec = githubSpec()
				}
				if err := e.cloud.PutSource(ctx, h.ID, p, spec); err != nil {
					return err
				}
				webhooks[p] = map[string]any{"enabled": true, "forward": r.URL + "/" + h.ID, "parallel": true}
			}
			host, err := rig.StartHost(ctx, rig.HostConfig{Bin: bins.Host, CloudURL: e.cloud.Admin.URL, ClaimCode: h.ClaimCode,
				StateDir: filepath.Join(dir, fmt.Sprintf("host-%d", i)),
				Config:   map[string]any{"webhooks": webhooks, "heartbeat_interval_s": 5, "transport": transport}})
			if err != nil {
				return err
			}
			e.hosts = append(e.hosts, host)
			e.ids = append(e.ids, h.ID)
			e.names = append(e.names, name)
			e.transports = append(e.transports, transport)
		}
		if e.fanout, err = createGroup(ctx, e, e.name+"-fanout", "fanout"); err != nil {
			return err
		}
		if e.any, err = createGroup(ctx, e, e.name+"-any", "any"); err != nil {
			return err
		}
	}
	fmt.Printf("soak: %d clouds (%s), %d hosts each (transports %s) and a fanout and an any group of them, %.0f webhooks/s for %s, sampled every %s\n",
		len(engines), engineNames(engines), len(hostTransports), strings.Join(hostTransports, ", "), cfg.rate, cfg.runFor, cfg.every)

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
	left, err := drain(ctx, engines, rcv, snd.groupEvents())
	if err != nil {
		return err
	}
	links := readLinks(ctx, engines)
	sent, accepted, gaveUp, why := snd.totals()
	rep := &report{cfg: cfg, engines: engineNames(engines), samples: samples, started: started,
		sent: sent, accepted: accepted, gaveUp: gaveUp, gaveUpWhy: why, restarts: restarts, retriedByHand: retried + rcv.handRetries(),
		load: loadAverage(), links: links}
	hostsOK, groupsOK := snd.acceptedKeys()
	hostRuns, groupRuns := rcv.successes()
	rep.check(hostsOK, groupsOK, hostRuns, groupRuns, hostNames(engines), left)
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

// hostNames are every host's name by its id.
func hostNames(es []*engine) map[string]string {
	n := map[string]string{}
	for _, e := range es {
		for i, id := range e.ids {
			n[id] = e.names[i]
		}
	}
	return n
}

// hostLink is what a run saw of one host's transport.
type hostLink struct {
	engine, name, configured string
	last                     link // its page at the end
	err                      error
	sockets, lost, fellBack  int // over every start: "socket connected", "socket lost", "socket unavailable" in its log
}

// readLinks reads every host's page and log at the end of the run.
func readLinks(ctx context.Context, engines []*engine) []hostLink {
	var out []hostLink
	for _, e := range engines {
		for i, h := range e.hosts {
			l, err := readLink(ctx, h)
			out = append(out, hostLink{engine: e.name, name: e.names[i], configured: e.transports[i], last: l, err: err,
				sockets: logCount(h, "socket connected"), lost: logCount(h, "socket lost"), fellBack: logCount(h, "socket unavailable")})
		}
	}
	return out
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
