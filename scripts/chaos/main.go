// Command chaos is the relay's fault suite (`make chaos`): each scenario runs
// the real binaries (or the stores in-process), injects one kind of fault
// while webhooks flow, and then compares four records of what happened:
//
//   - the sender's log of the 2xx answers it got (the sender behaves like a
//     provider: it retries a non-2xx answer or a transport error with the
//     same event id, with a short backoff, until a deadline);
//   - the cloud's deliveries (admin API);
//   - each host's ledger (`host ledger list --json`);
//   - each receiver's log, by Idempotency-Key.
//
// A scenario passes when every event that got a 2xx was handled exactly
// once, nothing was handled that did not get a 2xx, and no host handled
// another host's event. A repeat that the relay documents as its
// at-least-once window (the host died, or could not write its ledger, after
// the handler ran; the repeat carries the same Idempotency-Key) is counted
// and reported, not failed; a run after a success the ledger recorded is a
// duplicate.
//
// The scenarios (on a throwaway Postgres with fsync on but the seventh, on
// SQLite; binaries built once into a temporary directory):
//
//  1. cloud-sigkill: two `cloud serve` replicas, one SIGKILLed and restarted
//     every 3 s during 5,000 webhooks; hosts go through a balancer.
//  2. postgres-restart: `pg_ctl stop -m immediate` mid-load, then a restart
//     on the same port: only 5xx while down, recovery time reported.
//  3. host-sigkill: two hosts drain 5,000 webhooks while SIGKILLed at random
//     points and restarted.
//  4. network-faults: toxiproxy between each host and the cloud: latency,
//     reset_peer, stalls that time out, a 60 s partition.
//  5. ledger-disk-full: one host's state directory on a small tmpfs, filled
//     up while webhooks come, then freed (skipped without mount rights).
//  6. four-claimers: four store pools lease one host's deliveries in a loop
//     for 60 s on Postgres and on SQLite; no two leases of a delivery
//     overlap.
//  7. abusive-clients: while a sender delivers 20 signed webhooks a second
//     from 127.0.0.1, attackers from 127.0.0.2 on flood the cloud's public
//     edge for 60 s — 1 MB made-up host ids and source names, unsigned 1 MiB
//     and 25 MiB bodies, header floods, claim-code guesses, junk token
//     exchanges, slow headers and slow bodies. Besides the four records:
//     every legitimate request answered 2xx (no 429 or 503, none cut) and
//     the cloud's peak RSS under -abuse-rss-mib (256); it reports the
//     attackers' rates, the legitimate latency, the peak RSS and the growth
//     of the database and the log.
//  8. host-restarts: two hosts drain 5,000 webhooks while stopped as a
//     deploy stops them (SIGTERM) at random points and restarted; their
//     sources allow one attempt alone, so a restart that spent one would
//     dead-letter a webhook. Every webhook handled exactly once.
//  9. groups: an `any` group of three hosts takes 20 webhooks a second for
//     4 minutes while its members are SIGKILLed (each every 2–6 s, down for
//     0.2–3 s), beside a `fanout` group of three hosts taking as many. Every
//     2xx handled at least once by an any member and exactly once by each
//     fanout member; every repeat in the any group follows a run that was
//     never acked (in a member's ledger, its ack never taken; or cut by its
//     member's SIGKILL); nothing dead-lettered. Its short version (-short
//     -run groups) lasts 40 s.
//
// Scenarios 1, 3, 4, 5, 8 and 9 run once per host transport in -transports
// (default: heartbeat, then websocket), named e.g. "3-host-sigkill/websocket".
// On websocket the hosts keep sockets, which the cloud SIGKILL, the resets,
// the stalls and the partition cut, and which the cloud sees close when a
// host is SIGKILLed; the hosts only reconnect (no heartbeat fallback).
//
// Usage:
//
//	go run ./scripts/chaos [-short] [-run REGEX] [-transports LIST] [-v] [-keep] [-seed N]
//	    [-abuse-scale F] [-abuse-for D] [-abuse-kinds REGEX] [-abuse-rss-mib N] [-abuse-abort-mib N]
//
// -short runs scenarios 1, 3 and 4 in short versions (about 90 s in all
// per transport); with -run it shortens the scenarios picked (-run matches
// the name with its transport: -run 'host-sigkill/websocket'). The last line is
// "N passed, N failed"; the exit status is 1 when any failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// scenario is one fault and its checks.
type scenario struct {
	num   int
	name  string
	short bool // part of the -short suite
	hosts bool // runs hosts: once per transport
	run   func(ctx context.Context, e *env) result
}

// result is what a scenario found.
type result struct {
	skipped  string   // non-empty: why the scenario did not run
	failures []string // empty: passed
	figures  []string // key figures, printed on the result line
}

func (r *result) failf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *result) figuref(format string, args ...any) {
	r.figures = append(r.figures, fmt.Sprintf(format, args...))
}

var scenarios = []scenario{
	{1, "cloud-sigkill", true, true, runCloudKill},
	{2, "postgres-restart", false, false, runPostgresKill},
	{3, "host-sigkill", true, true, runHostKill},
	{4, "network-faults", true, true, runNetworkFaults},
	{5, "ledger-disk-full", false, true, runDiskFull},
	{6, "four-claimers", false, false, runClaimers},
	{7, "abusive-clients", false, false, runAbusive},
	{8, "host-restarts", false, true, runHostRestarts},
	{9, "groups", false, true, runGroups},
}

// run is a scenario on one host transport.
type run struct {
	scenario
	transport string
}

func (r run) label() string {
	if !r.hosts {
		return fmt.Sprintf("%d-%s", r.num, r.name)
	}
	return fmt.Sprintf("%d-%s/%s", r.num, r.name, r.transport)
}

func main() {
	short := flag.Bool("short", false, "short versions of scenarios 1, 3 and 4 only")
	runRe := flag.String("run", "", "run only the scenarios whose number or name matches this regular expression")
	verbose := flag.Bool("v", false, "log progress")
	keep := flag.Bool("keep", false, "keep the work directory (logs, ledgers) after the run")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the random fault timing")
	abuseScale := flag.Float64("abuse-scale", 1, "scenario 7: multiplies every attacker's rate and connections")
	abuseFor := flag.Duration("abuse-for", 60*time.Second, "scenario 7: how long the attack lasts")
	abuseRSS := flag.Int64("abuse-rss-mib", 256, "scenario 7: the bound on the cloud's peak RSS, MiB")
	abuseKinds := flag.String("abuse-kinds", "", "scenario 7: run only the kinds of attack whose name matches this regular expression")
	abuseAbort := flag.Int64("abuse-abort-mib", 2048, "scenario 7: the cloud RSS at which the attack stops early, MiB (protects the machine)")
	transports := flag.String("transports", "heartbeat,websocket", "the host transports scenarios with hosts run on, in turn (heartbeat, websocket, auto)")
	flag.Parse()
	var hostTransports []string
	for _, tr := range strings.Split(*transports, ",") {
		switch tr = strings.TrimSpace(tr); tr {
		case "heartbeat", "websocket", "auto":
			hostTransports = append(hostTransports, tr)
		default:
			fmt.Fprintf(os.Stderr, "chaos: -transports: unknown transport %q (heartbeat, websocket, auto)\n", tr)
			os.Exit(2)
		}
	}
	if *abuseScale <= 0 || *abuseFor <= 0 || *abuseRSS <= 0 || *abuseAbort <= 0 {
		fmt.Fprintln(os.Stderr, "chaos: -abuse-scale, -abuse-for, -abuse-rss-mib and -abuse-abort-mib must be positive")
		os.Exit(2)
	}
	abuse := abuseConfig{scale: *abuseScale, length: *abuseFor, rssBound: *abuseRSS << 20, rssAbort: *abuseAbort << 20}
	if *abuseKinds != "" {
		var err error
		if abuse.kinds, err = regexp.Compile(*abuseKinds); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: -abuse-kinds: %v\n", err)
			os.Exit(2)
		}
	}

	var re *regexp.Regexp
	if *runRe != "" {
		var err error
		if re, err = regexp.Compile(*runRe); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: -run: %v\n", err)
			os.Exit(2)
		}
	}
	var picked []run
	for _, s := range scenarios {
		if *short && !s.short && re == nil {
			continue
		}
		trs := hostTransports
		if !s.hosts {
			trs = []string{"heartbeat"}
		}
		for _, tr := range trs {
			r := run{s, tr}
			if re != nil && !re.MatchString(r.label()) {
				continue
			}
			picked = append(picked, r)
		}
	}
	if len(picked) == 0 {
		fmt.Fprintln(os.Stderr, "chaos: no scenario matches")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	e, err := newEnv(ctx, *short, *verbose, *keep, *seed)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: set-up: %v\n", err)
		os.Exit(1)
	}
	e.abuse = abuse
	fmt.Printf("seed %d (repeat the fault timing with -seed %d)\n", *seed, *seed)
	e.logf("set-up took %s", time.Since(start).Round(time.Millisecond))

	passed, failed := 0, 0
	var skipped []string
	for _, s := range picked {
		if ctx.Err() != nil {
			break
		}
		label := s.label()
		e.logf("=== %s", label)
		t0 := time.Now()
		e.transport = s.transport
		r := e.runScenario(ctx, s.scenario)
		took := time.Since(t0).Round(100 * time.Millisecond)
		figs := strings.Join(r.figures, "; ")
		switch {
		case r.skipped != "":
			fmt.Printf("SKIP %-28s %8s  skipped: %s\n", label, took, r.skipped)
			skipped = append(skipped, label)
		case len(r.failures) == 0:
			fmt.Printf("PASS %-28s %8s  %s\n", label, took, figs)
			passed++
		default:
			fmt.Printf("FAIL %-28s %8s  %s\n", label, took, figs)
			for _, f := range r.failures {
				fmt.Printf("     %s\n", f)
			}
			failed++
		}
	}
	e.close()
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		failed++
	}
	if len(skipped) > 0 {
		fmt.Printf("skipped: %s\n", strings.Join(skipped, ", "))
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
