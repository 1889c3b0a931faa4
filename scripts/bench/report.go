package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// report collects every scenario's rows.
type report struct {
	intake  []intakeRow
	latency []latencyRow
	drain   []drainRow
	floor   *floorRow // with the drain: forwarding alone
	e2e     []e2eRow
	// with the end-to-end runs: what one hop and one commit cost here
	latencyFloor *latencyFloorRow
	idle         []idleRow
	// groups of hosts (groups.go)
	groupIntake   []intakeRow
	groupDrain    []groupDrainRow
	groupFailover []groupFailoverRow
	// the store at scale (scale.go)
	scale []scaleRow
}

func (rep *report) markdown(b *bench) string {
	var w strings.Builder
	cfg := b.cfg
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }

	p("# Benchmarks\n\n")
	p("Measured by `scripts/bench` with real `cloud` and `host` processes on one machine; the load generator\n")
	p("runs in the same process as the harness and shares the CPUs with the cloud, the host and Postgres.\n\n")
	p("| | |\n|---|---|\n")
	p("| date | %s |\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	p("| machine | %s |\n", machine(b.work))
	p("| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	p("| source | %s |\n", b.source)
	if pg := postgresVersion(); pg != "" {
		p("| Postgres | %s, throwaway server with fsync, synchronous_commit and full_page_writes on (`PGTEST_DURABLE=1`) |\n", pg)
		if cfg.pgSet != "" {
			p("| Postgres settings | `%s`, the rest its defaults |\n", cfg.pgSet)
		}
	}
	if v := moduleVersion(b.root, "modernc.org/sqlite"); v != "" {
		cache := ""
		if cfg.sqliteCacheMB > 0 {
			cache = fmt.Sprintf(" with a page cache of %d MiB (`RELAY_SQLITE_CACHE_MB`)", cfg.sqliteCacheMB)
		}
		p("| SQLite | modernc.org/sqlite %s, as the cloud configures it%s |\n", v, cache)
	}
	p("| command | `%s` |\n", command())
	p("| run time | %s |\n\n", time.Since(b.started).Round(time.Second))
	p("Every run starts its own `cloud serve` on a fresh database (a new Postgres database, a new SQLite file),\n")
	p("with the per-host intake rate limit lifted (`RELAY_RATE_LIMIT_PER_MIN=1000000`), no limit of connections per\n")
	p("address and a lenient authentication limiter (`RELAY_MAX_CONNS_PER_IP=0`, `RELAY_AUTH_FAILURES_PER_MIN=100000`:\n")
	p("every bench client is 127.0.0.1) and default logging.\n")
	p("%s\n", requestsText(b))
	p("Figures in this file before 2026-11-25 were measured with counter event ids (`prefix-1`, `prefix-2`, …)\n")
	p("and one 3,329-byte payload, which flattered SQLite's intake about 2× (its dedupe index grew at one end).\n\n")
	p("Latencies are in milliseconds; peak RSS is the process's VmHWM in MiB;\n")
	p("CPU is in cores (1.0 = one core busy for the whole run) from /proc/PID/stat; Postgres CPU counts\n")
	p("every process of the server (SQLite runs inside the cloud, so its cost is in the cloud's CPU).\n\n")

	if len(rep.intake) > 0 {
		p("## Intake throughput\n\n")
		p("Closed loop: each of *concurrency* workers sends, waits for the answer, sends again, for %s after a\n", cfg.intakeDuration)
		p("%s warm-up. *errors* are non-2xx answers + transport errors; latencies are those of the 2xx answers.\n", cfg.warmup)
		p("*CPU µs/webhook* is the cloud's and Postgres's CPU per accepted webhook, which depends less on what else\n")
		p("runs on the machine than the rate does. *cloud RSS at the end* splits the cloud's resident memory as the\n")
		p("run ends into its binary's pages (files) / what Go's runtime holds (heap, stacks, its own structures; less what\n")
		p("it returned) / the rest (on SQLite, its page cache and allocator), in MiB. *bytes/webhook* is what the\n")
		p("database grew by over the run / wrote to its write-ahead log, per webhook stored: the growth is SQLite's\n")
		p("pages (`page_count` × `page_size`, as a reader sees the last commit) or Postgres's `pg_database_size`; the\n")
		p("WAL is Postgres's (`pg_current_wal_lsn` before and after; SQLite rewrites its log in place: –).\n\n")
		p("| engine | concurrency | accepted/s | p50 | p99 | p99.9 | errors | cloud CPU | Postgres CPU | CPU µs/webhook | bytes/webhook: database / WAL | load generator CPU | cloud peak RSS | cloud RSS at the end: files / Go / rest |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.intake {
			if r.err != "" {
				p("| %s | %d | failed: %s |||||||||||\n", r.engine, r.conc, oneLine(r.err))
				continue
			}
			p("| %s | %d | %.0f | %s | %s | %s | %d + %d | %s | %s | %s | %s | %s | %s | %s |\n", r.engine, r.conc, r.res.Rate,
				ms(r.p50), ms(r.p99), ms(r.p999), r.res.BadStatus, r.res.Transport, cores(r.cloudCPU), cores(r.dbCPU),
				cpuSplit(usPer(r.cloudCPU, r.res.Rate), usPer(r.dbCPU, r.res.Rate)), cpuSplit(r.dbGrowth, r.walPer), cores(r.selfCPU), mib(r.cloudPeak), r.mem)
		}
		p("\n")
	}
	if len(rep.latency) > 0 {
		p("## Intake latency under steady load\n\n")
		p("Open loop: request *i* is due at start + *i*/rate whatever happened to the others, and its latency is\n")
		p("measured from that scheduled time, so queueing behind a slow answer is counted (no coordinated omission);\n")
		p("at most %d requests are outstanding. Each run lasts %s after a %s warm-up.\n\n", cfg.latencyMaxIn, cfg.latencyDur, cfg.warmup)
		p("| engine | target/s | achieved/s | p50 | p99 | p99.9 | max | errors | cloud CPU | Postgres CPU | cloud peak RSS |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.latency {
			if r.err != "" {
				p("| %s | %d | failed: %s ||||||||\n", r.engine, r.rate, oneLine(r.err))
				continue
			}
			p("| %s | %d | %.0f | %s | %s | %s | %s | %d + %d | %s | %s | %s |\n", r.engine, r.rate, r.res.Rate,
				ms(r.p50), ms(r.p99), ms(r.p999), ms(r.max), r.res.BadStatus, r.res.Transport, cores(r.cloudCPU), cores(r.dbCPU), mib(r.cloudPeak))
		}
		p("\n")
	}
	if len(rep.drain) > 0 {
		p("## Drain\n\n")
		p("*queued* deliveries wait for one host that is not running (sent through the intake by %d workers, at\n", cfg.drainConc)
		p("*queue rate*); then the host starts (`parallel: true`, %d workers, a `forward` handler to a local\n", cfg.drainWorkers)
		p("receiver). *deliveries/s* counts from the host's start to the cloud counting every delivery acked;\n")
		p("*last forwarded* is when the receiver got the last one. *CPU µs/delivery* is each process's CPU over\n")
		p("that time per delivery (cloud / database / host / receiver, the receiver being the load generator):\n")
		p("their sum bounds the rate on *n* cores at *n* / sum.\n\n")
		p("*transport* is the host's: `heartbeat` (batches leased by heartbeats) or `websocket` (pushed within credit).\n\n")
		p("| engine | transport | queued | queue rate/s | last forwarded | last acked | deliveries/s | duplicates | CPU µs/delivery | cloud peak RSS | host peak RSS |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.drain {
			if r.err != "" {
				p("| %s | %s | %d | failed: %s ||||||||\n", r.engine, r.transport, r.queued, oneLine(r.err))
				continue
			}
			p("| %s | %s | %d | %.0f | %s | %s | %.0f | %d | %s | %s | %s |\n", r.engine, r.transport, r.queued, r.insertRate,
				secs(r.toForward), secs(r.toAck), r.rate, r.duplicates, cpuSplit(r.cloudUS, r.dbUS, r.hostUS, r.recvUS),
				mib(r.cloudPeak), mib(r.hostPeak))
		}
		p("\n")
	}
	if f := rep.floor; f != nil {
		p("### Forwarding alone\n\n")
		p("The same number of requests as a drain forwards, each as the host sends a delivery (the payload,\n")
		p("GitHub's headers and the relay's), from a plain Go HTTP client in a process of its own, %d at a time,\n", f.workers)
		p("to the same kind of receiver: no cloud, no heartbeat, no ledger. A drain here cannot be faster, and\n")
		p("the CPU it takes is part of every drain's.\n\n")
		p("| requests | requests/s | CPU µs/request (client / receiver) |\n")
		p("|---:|---:|---:|\n")
		if f.err != "" {
			p("| %d | failed: %s ||\n\n", f.requests, oneLine(f.err))
		} else {
			p("| %d | %.0f | %s |\n\n", f.requests, f.rate, cpuSplit(f.clientUS, f.recvUS))
		}
	}
	if len(rep.e2e) > 0 {
		p("## End to end\n\n")
		p("Open loop at *rate* webhooks/s for %s to a running host (heartbeat interval 1 s, a `forward` handler),\n", cfg.e2eDuration)
		p("after %s of unmeasured webhooks at the same rate have all arrived (the steady state: the host's first\n", cfg.warmup)
		p("heartbeats, connections and caches are behind it):\n")
		p("the time from each POST to its arrival at the local receiver, matched by `X-GitHub-Delivery`. *sequential*\n")
		p("is a source's default (one webhook at a time, in order; 4 workers); *parallel* is `parallel: true` with\n")
		p("%d workers. *transport*: `heartbeat` is the long poll (an idle host's heartbeat held until work comes),\n", cfg.e2eWorkers)
		p("`websocket` the socket (each webhook pushed as it is committed). Where the time goes: *p50 intake* is\n")
		p("the POST until the intake's answer (signature verified, stored and committed), *p50 after* that\n")
		p("answer until the handler (negative: the push or the long poll's answer, which also follow the commit,\n")
		p("beat the intake's own answer). *p50 / p99 < %d KiB*: the webhooks under %d KiB alone, that is the mix\n", bigBody>>10, bigBody>>10)
		p("without its 300 KB push (1 %% of the requests: were those the slowest, they alone would make the whole's p99).\n\n")
		p("| engine | host | transport | rate/s | sent | arrived | p50 | p99 | max | p50 / p99 < %d KiB | p50 intake | p50 after | errors | cloud peak RSS | host peak RSS |\n", bigBody>>10)
		p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.e2e {
			if r.err != "" && r.arrived == 0 {
				p("| %s | %s | %s | %g | failed: %s |||||||||\n", r.engine, r.mode, r.transport, r.rate, oneLine(r.err))
				continue
			}
			p("| %s | %s | %s | %g | %d | %d | %s | %s | %s | %s / %s | %s | %s | %d | %s | %s |\n", r.engine, r.mode, r.transport, r.rate, r.sent, r.arrived,
				ms(r.p50), ms(r.p99), ms(r.max), ms(r.smallP50), ms(r.smallP99), ms(r.intakeP50), signedMS(r.afterP50), r.errors, mib(r.cloudPeak), mib(r.hostPeak))
		}
		p("\nStep by step (the median of each step, ms; the cloud and the host stamp each webhook with `RELAY_STEP_TIMES=1`,\n")
		p("shared/steptime): *verified* the request read and its signature checked, about to be stored; *stored* the\n")
		p("insert committed, for a webhook stored leased to the host's waiting socket or long poll, which *leased* then\n")
		p("marks taking it; otherwise *notified* the store's wake-up right after the intake's commit (on Postgres: its\n")
		p("NOTIFY received), *woken* the waiting push or long poll got it, *lease_began* … *leased* the lease\n")
		p("transaction; *encoded* the frame or answer about to be written, *decoded* the host took it in, *looked_up*\n")
		p("the ledger said it had not run, *handler* the handler starts, *received* the receiver read it. A count in\n")
		p("brackets: how many webhooks took that step, when not all did.\n\n")
		for _, r := range rep.e2e {
			if r.steps != "" {
				p("- %s %s %s %g/s: %s\n", r.engine, r.mode, r.transport, r.rate, r.steps)
			}
		}
		p("\nThe same for the slowest 1 %% of each run (those at or above its p99): where its tail goes.\n\n")
		for _, r := range rep.e2e {
			if r.tailSteps != "" {
				p("- %s %s %s %g/s: %s\n", r.engine, r.mode, r.transport, r.rate, r.tailSteps)
			}
		}
		if f := rep.latencyFloor; f != nil {
			p("\nThe machine's floor at %g/s, measured after the runs above: a webhook crosses three processes' borders\n", f.rate)
			p("(the provider's POST to the cloud, the push or the long poll's answer to the host, the host's forward) and\n")
			p("waits for at least one durable write (the intake's commit). *one hop*: a plain Go HTTP client in a process of\n")
			p("its own sends the mix's payloads, one at a time at that rate, to the same kind of receiver; the time from its\n")
			p("send to the receiver's read of the body. *one commit*: %d KiB written to a file on the databases' disk (over\n", commitSize>>10)
			p("and over, as SQLite reuses its write-ahead log) and `fdatasync`ed, at that rate. Three hops and a commit are\n")
			p("what no relay on this machine can go below.\n\n")
			if f.err != "" {
				p("Not measured: %s\n", oneLine(f.err))
			} else {
				p("| | p50 | p90 | p99 |\n|---|---:|---:|---:|\n")
				p("| one hop | %s | %s | %s |\n", ms(f.hop.at(0.5)), ms(f.hop.at(0.9)), ms(f.hop.at(0.99)))
				p("| one commit | %s | %s | %s |\n", ms(f.commit.at(0.5)), ms(f.commit.at(0.9)), ms(f.commit.at(0.99)))
				p("| three hops and a commit (sum of the medians) | %s | | |\n", ms(3*f.hop.at(0.5)+f.commit.at(0.5)))
			}
		}
		p("\n")
	}
	if len(rep.idle) > 0 {
		p("## Idle hosts\n\n")
		p("*hosts* hosts are created and claimed through the API, then each sends an authenticated heartbeat every\n")
		if cfg.idleWait > 0 {
			p("%s (spread evenly), with `wait_s: %d` as an idle host's long poll asks, so the cloud holds it;\n", cfg.idleInterval, cfg.idleWait)
		} else {
			p("%s (spread evenly), without `wait_s`;\n", cfg.idleInterval)
		}
		p("the cloud's CPU is measured over the first %s of heartbeats. With `websocket`, each host instead\n", cfg.idleDuration)
		p("keeps a socket open (hello with credit 32, then reading, which answers the cloud's pings) and the cloud's\n")
		p("CPU is measured over %s once all are open (*sent* is the sockets tried, *answered* those open).\n", cfg.idleDuration)
		p("*RSS per host* is the cloud's resident set grown from before the first heartbeat or socket to the end,\n")
		p("per host.\n\n")
		p("| engine | transport | hosts | create + claim | heartbeats sent | answered | errors | cloud CPU | cloud peak RSS | RSS per host |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.idle {
			if r.err != "" {
				p("| %s | %s | %d | failed: %s |||||||\n", r.engine, r.transport, r.hosts, oneLine(r.err))
				continue
			}
			p("| %s | %s | %d | %s | %d | %d | %d | %s | %s | %s |\n", r.engine, r.transport, r.hosts, secs(r.setup), r.sent, r.heartbeats, r.errors,
				cores(r.cloudCPU), mib(r.cloudPeak), kib(r.perHost))
		}
		p("\n")
	}
	rep.groupsMarkdown(&w, b)
	rep.scaleMarkdown(&w, b)
	return w.String()
}

// groupsMarkdown writes the group scenarios' sections, each beside the
// single host's figures of the same run.
func (rep *report) groupsMarkdown(w *strings.Builder, b *bench) {
	cfg := b.cfg
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if len(rep.groupIntake) > 0 {
		p("## Groups: intake to a fanout group\n\n")
		p("The intake run above, sent to a `fanout` group of %d hosts (not running, as the intake's host is not)\n", groupIntakeMembers)
		p("instead of one host: each webhook is stored as a delivery for every member, its body once. *one host* and\n")
		p("*× one host* compare with the intake row of the same engine and concurrency: the cloud's CPU µs per webhook (the\n")
		p("expectation: at most 1.5×) and the bytes per webhook, the database's growth and (Postgres) its WAL, as\n")
		p("the intake table measures them.\n\n")
		p("| engine | members | concurrency | accepted/s | one host accepted/s | p50 | p99 | errors | cloud CPU µs/webhook | × one host | bytes/webhook: database / WAL | × one host: database / WAL | cloud peak RSS |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.groupIntake {
			if r.err != "" {
				p("| %s | %d | %d | failed: %s ||||||||||\n", r.engine, r.members, r.conc, oneLine(r.err))
				continue
			}
			oneRate, cpuRatio, dbRatio, walRatio := "–", -1.0, -1.0, -1.0
			if one, ok := singleIntake(rep.intake, r.engine, r.conc); ok {
				oneRate = fmt.Sprintf("%.0f", one.res.Rate)
				cpuRatio = groupRatio(usPer(r.cloudCPU, r.res.Rate), usPer(one.cloudCPU, one.res.Rate))
				dbRatio, walRatio = groupRatio(r.dbGrowth, one.dbGrowth), groupRatio(r.walPer, one.walPer)
			}
			p("| %s | %d | %d | %.0f | %s | %s | %s | %d + %d | %s | %s | %s | %s / %s | %s |\n", r.engine, r.members, r.conc, r.res.Rate, oneRate,
				ms(r.p50), ms(r.p99), r.res.BadStatus, r.res.Transport, cpuSplit(usPer(r.cloudCPU, r.res.Rate)), times(cpuRatio),
				cpuSplit(r.dbGrowth, r.walPer), times(dbRatio), times(walRatio), mib(r.cloudPeak))
		}
		p("\n")
	}
	if len(rep.groupDrain) > 0 {
		p("## Groups: drain to an any group\n\n")
		p("The drain above, to an `any` group of %d hosts: the deliveries are queued while no member runs, then all\n", groupDrainMembers)
		p("start at once (each as the drain's host: `parallel: true`, %d workers, a `forward` handler to a receiver of\n", cfg.drainWorkers)
		p("its own). *deliveries/s* counts from their start to the cloud counting every delivery acked; *one host* is\n")
		p("the drain's of the same engine and transport. *held when queued* is each member's share of the deliveries\n")
		p("as they waited (with no member online the cloud gives each new one to a member all the same);\n")
		p("*acked by* each member's share at the end (the member whose ack the cloud took); *duplicates* are runs of\n")
		p("a delivery beyond its first, on any member.\n\n")
		p("| engine | transport | members | queued | held when queued | last forwarded | last acked | deliveries/s | one host deliveries/s | acked by member | duplicates |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.groupDrain {
			if r.err != "" {
				p("| %s | %s | %d | %d | failed: %s |||||||\n", r.engine, r.transport, r.members, r.queued, oneLine(r.err))
				continue
			}
			one := "–"
			if d, ok := singleDrain(rep.drain, r.engine, r.transport); ok {
				one = fmt.Sprintf("%.0f", d.rate)
			}
			p("| %s | %s | %d | %d | %s | %s | %s | %.0f | %s | %s | %d |\n", r.engine, r.transport, r.members, r.queued, sharesText(r.held),
				secs(r.toForward), secs(r.toAck), r.rate, one, sharesText(r.acked), r.duplicates)
		}
		p("\n")
	}
	if len(rep.groupFailover) > 0 {
		p("## Groups: a member of an any group killed\n\n")
		p("An `any` group of %d running hosts (a source's default: one webhook at a time, in order) takes %g webhooks/s\n", groupFailoverMembers, cfg.groupRate)
		p("for %s. A third of the way in, the first member's app stops answering (a handler at work); once it holds\n", cfg.groupFailoverDur)
		p("work the member is SIGKILLed. *held*: its deliveries not done as it died (*leased* to it, or *waiting* on\n")
		p("it to take them); *handed over*: the time from the SIGKILL until another member's handler had each.\n")
		p("*sent after*: the webhooks sent after the SIGKILL (the cloud hands new ones to the killed member\n")
		p("until it no longer counts it online), and the most one took from its POST to a member's handler.\n\n")
		p("| engine | transport | sent | held: leased + waiting | run by another member | handed over p50 | max | max of the leased | max of the waiting | sent after | its max | bound by |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, r := range rep.groupFailover {
			if r.err != "" && r.handed == 0 {
				p("| %s | %s | %d | failed: %s |||||||||\n", r.engine, r.transport, r.sent, oneLine(r.err))
				continue
			}
			p("| %s | %s | %d | %d + %d | %d | %s | %s | %s | %s | %d | %s | %s |\n", r.engine, r.transport, r.sent, r.leased, r.waiting, r.handed,
				secsOf(r.handed, r.p50), secsOf(r.handed, r.max), secsOf(r.leased, r.maxLeased), secsOf(r.waiting, r.maxWaiting),
				r.after, secsOf(r.after, r.afterMax), r.bound)
		}
		p("\n")
	}
}

// times is a ratio as the report shows it: "1.23×", "–" when unknown.
func times(r float64) string {
	if r < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// requestsText says what the load generator sends.
func requestsText(b *bench) string {
	var w strings.Builder
	cfg := b.cfg
	if cfg.payloads == "mix" {
		fmt.Fprintf(&w, "Requests are real provider webhooks, signed as each provider signs them, in a fixed mix by weight\n")
		fmt.Fprintf(&w, "(per thousand; mean body %d bytes):", b.mix.meanSize())
		for i, k := range b.mix.kinds {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&w, "%s %s %s %.1f KB × %d", sep, k.provider, k.name, float64(len(k.body))/1000, k.weight)
		}
		fmt.Fprintf(&w, ". The 300 KB push is built from the real one by adding commits.")
	} else {
		fmt.Fprintf(&w, "Requests are signed GitHub `installation` webhooks (one real %d-byte payload).", len(b.mix.kinds[0].body))
	}
	if cfg.ids == "random" {
		fmt.Fprintf(&w, "\nEach has its own random event id in its provider's shape (`X-GitHub-Delivery` a UUID, Stripe's `evt_…`).")
	} else {
		fmt.Fprintf(&w, "\nEach has its own event id made of a run prefix and a counter (`-ids counter`).")
	}
	if cfg.dup > 0 {
		fmt.Fprintf(&w, " A share of %.0f%% replays a webhook already accepted (a provider's retry), answered 200 and stored once.", cfg.dup*100)
	}
	return w.String() + "\n"
}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mib(b int64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func cores(c float64) string {
	if c < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", c)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// command is the command line that made the report.
func command() string {
	parts := []string{"go run ./scripts/bench"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t\"'$`\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// machine describes the CPU, memory, kernel and the work directory's
// filesystem.
func machine(dir string) string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int64
			if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); n == 1 {
				mem = fmt.Sprintf(", %.1f GiB RAM", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	fs := ""
	if t := fsType(dir); t != "" {
		fs = ", data on " + t
	}
	return fmt.Sprintf("%d × %s%s%s%s", runtime.NumCPU(), model, mem, kernel, fs)
}

// fsType is the type of the filesystem holding path, from /proc/mounts.
func fsType(path string) string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	best, typ := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, typ = mp, f[2]
		}
	}
	return typ
}

// revision is the commit the binaries were built from, and whether the
// working tree differed from it.
func revision(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " with uncommitted changes"
	}
	return rev
}

func postgresVersion() string {
	out, err := exec.Command("pg_config", "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// moduleVersion is mod's version in the module's go.mod.
func moduleVersion(root, mod string) string {
	b, err := os.ReadFile(root + "/go.mod")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == mod {
			return f[1]
		}
	}
	return ""
}

// usPer is µs of CPU per item from a share of cores and a rate a second
// (-1 if either is unknown).
func usPer(cores, rate float64) float64 {
	if cores < 0 || rate <= 0 {
		return -1
	}
	return cores / rate * 1e6
}

// cpuSplit shows CPU µs per delivery of each process, "–" where unknown
// (no database process on SQLite).
func cpuSplit(us ...float64) string {
	parts := make([]string, len(us))
	for i, v := range us {
		parts[i] = "–"
		if v >= 0 {
			parts[i] = fmt.Sprintf("%.0f", v)
		}
	}
	return strings.Join(parts, " / ")
}

// kib is a size in KiB, for what a host costs.
func kib(n int64) string {
	if n <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}

// signedMS is ms for a duration that may be negative.
func signedMS(d time.Duration) string {
	if d < 0 {
		return "−" + ms(-d)
	}
	return ms(d)
}

// String is the split as the intake table shows it: files / Go / rest, in
// MiB, or "–" when unknown.
func (m memSplit) String() string {
	if m.goMem <= 0 {
		return "–"
	}
	f := func(b int64) float64 { return float64(b) / (1 << 20) }
	return fmt.Sprintf("%.0f / %.0f / %.0f", f(m.file), f(m.goMem), f(m.other))
}

// scaleMarkdown writes the scale scenario's section: for each engine a
// table by stored deliveries, each figure beside the load average of the
// machine as it was measured.
func (rep *report) scaleMarkdown(w *strings.Builder, b *bench) {
	if len(rep.scale) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## The store at scale, this run's sizes\n\n")
	p("For each size *N*, a cloud starts on a new database; %s hosts are created with a GitHub and a Stripe source\n", thousands(scaleHosts))
	p("over its admin API; the cloud stops and the loader (scripts/bench/fill.go) stores *N* webhooks of the mix\n")
	p("through the cloud's own intake (`intake.Service.Admit` over `store.GroupCommit`: everything but the HTTP request\n")
	p("and its signature check), received evenly over the week before the run and spread over the hosts, in rounds\n")
	p("of a day: after each, every host leases what it was sent as its socket does and reports it with its result\n")
	p("(an ack recording it written, then acked): %.0f %% nacked as not retryable (dead-lettered), %.0f %% of the week failed once\n", fillShareDLQ*100, fillShareRetrying*100)
	p("in the last day (retrying), the newest %.0f %% never leased (queued), the rest acked; the counts' change log is\n", fillSharePending*100)
	p("folded after each round as the cloud's sweep folds it, and Postgres is vacuumed (`VACUUM (ANALYZE)`) after the\n")
	p("fill, as autovacuum would have over the week, then checkpointed (the fill's writes on disk before anything is\n")
	p("measured), and SQLite's statistics are gathered as the cloud gathers\n")
	p("them when it opens a store (`PRAGMA optimize`). ")
	if b.cfg.scaleBase > 0 {
		p("Above %s on Postgres (`-scale-base`), the loader writes %s and the rest are copies of its deliveries\n", thousands(b.cfg.scaleBase), thousands(b.cfg.scaleBase))
		p("made in SQL (scripts/bench/copies.go), each with its own ids, correlation id and trace and its times moved\n")
		p("between the loader's receipts, the rest of its row, body and trail as the loader stored them. ")
	}
	p("Then the cloud starts\n")
	p("again on the filled store and each read is called %d times, one after the other, over HTTP (the admin API with\n", b.cfg.scaleReads)
	p("the admin token, the console with a session, `cloud ctl inspect` as a process of its own, its start included), on\n")
	p("a host of about *N*/%s deliveries, a delivery received half a week before, and ids that are not there; the\n", thousands(scaleHosts))
	p("alert evaluation is timed in process on the store before the cloud starts. Then intake at concurrency %d\n", scaleIntakeConc)
	p("(as the intake table measures it), end to end at %d/s to a new host (sequential), and a drain of %s\n", scaleE2ERate, thousands(scaleDrainN))
	if b.cfg.scaleSustain > 0 {
		p("(after the intake run, intake goes on for %s more, each window timed as a run of its own: on Postgres the intake run\n", b.cfg.scaleSustain)
		p("begins in the checkpoint cycle the fill's `CHECKPOINT` started, where nearly every index page a webhook changes\n")
		p("goes whole into the WAL; the windows show whether the rate comes back as the cycle goes on)\n")
	}
	p("deliveries to another new host. Times in ms, p50 / p99; *load* is the 1-minute load average as each was measured.\n")
	p("A read's *first* is its first call's time: the cloud just started, that read's statements, pages and plans\n")
	p("are cold, and of a few dozen calls it is most often the slowest, the p99.\n\n")
	for _, engine := range b.cfg.engines {
		var rows []scaleRow
		for _, r := range rep.scale {
			if r.engine == engine {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		p("### %s\n\n", engine)
		p("| |")
		for _, r := range rows {
			p(" N = %s |", thousands(r.n))
		}
		p("\n|---|")
		for range rows {
			p("---:|")
		}
		p("\n")
		line := func(name string, cell func(r scaleRow) string) {
			p("| %s |", name)
			for _, r := range rows {
				if r.err != "" && cell(r) == "–" {
					p(" failed: %s |", oneLine(r.err))
					continue
				}
				p(" %s |", cell(r))
			}
			p("\n")
		}
		line("fill: webhooks/s (time)", func(r scaleRow) string {
			if r.fill == nil || r.fill.admitted == 0 {
				return "–"
			}
			loader := fmt.Sprintf("%.0f (%s)", float64(r.fill.admitted)/(r.fill.took-r.fill.copyTook).Seconds(),
				(r.fill.took - r.fill.copyTook).Round(time.Second))
			if r.fill.copied == 0 {
				return loader
			}
			return fmt.Sprintf("loader %s of %s; copies %.0f (%s)", loader, thousands(r.fill.admitted),
				float64(r.fill.copied)/r.fill.copyTook.Seconds(), r.fill.copyTook.Round(time.Second))
		})
		line("stored: acked / dead-lettered / retrying / queued", func(r scaleRow) string {
			if r.fill == nil || r.fill.admitted == 0 {
				return "–"
			}
			f := r.fill.byFate
			return fmt.Sprintf("%s / %s / %s / %s", thousands(f[store.StatusAcked]), thousands(f[store.StatusDLQ]),
				thousands(f[store.StatusRetrying]), thousands(f[store.StatusQueued]))
		})
		line("database size", func(r scaleRow) string {
			if r.dbBytes < 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f GiB", float64(r.dbBytes)/(1<<30))
		})
		line("bytes per stored delivery (database size / N)", func(r scaleRow) string {
			if r.dbBytes < 0 || r.n == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f", float64(r.dbBytes)/float64(r.n))
		})
		if engine == "postgres" {
			line("WAL the fill wrote per delivery", func(r scaleRow) string {
				if r.walBytes < 0 || r.n == 0 {
					return "–"
				}
				return fmt.Sprintf("%.0f", float64(r.walBytes)/float64(r.n))
			})
		}
		for i := range rows[0].reads {
			name := rows[0].reads[i].name
			line(name, func(r scaleRow) string {
				if i >= len(r.reads) {
					return "–"
				}
				rd := r.reads[i]
				switch {
				case rd.skipped != "":
					return "(" + rd.skipped + ")"
				case rd.calls == 0:
					return "–"
				case rd.errs == rd.calls:
					return "failed: " + oneLine(rd.err)
				}
				s := ms(rd.p50) + " / " + ms(rd.p99)
				if rd.first > 0 && rd.calls > 1 {
					s += "; first " + ms(rd.first)
				}
				if rd.errs > 0 {
					s += fmt.Sprintf(" (%d errors)", rd.errs)
				}
				return s
			})
		}
		line("load during the reads", func(r scaleRow) string { return loadText(r.readsLoad) })
		line(fmt.Sprintf("intake at c=%d: accepted/s, p50 / p99 (load)", scaleIntakeConc), func(r scaleRow) string {
			if r.intake.res.OK == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f, %s / %s (%s)", r.intake.res.Rate, ms(r.intake.p50), ms(r.intake.p99), loadText(r.intakeLoad))
		})
		line("intake: bytes/webhook, database / WAL", func(r scaleRow) string {
			if r.intake.res.OK == 0 {
				return "–"
			}
			return cpuSplit(r.intake.dbGrowth, r.intake.walPer)
		})
		line("intake: CPU µs/webhook, cloud / database; the machine idle, waiting on I/O", func(r scaleRow) string {
			if r.intake.res.OK == 0 {
				return "–"
			}
			return cpuSplit(usPer(r.intake.cloudCPU, r.intake.res.Rate), usPer(r.intake.dbCPU, r.intake.res.Rate)) +
				"; " + percent(r.intake.io.idle) + ", " + percent(r.intake.io.iowait)
		})
		if engine == "postgres" {
			line("intake: KiB/webhook the server read from storage; blocks/webhook read into its cache (most first); buffers/webhook its backends wrote out", func(r scaleRow) string {
				if r.intake.res.OK == 0 {
					return "–"
				}
				kb := "–"
				if r.intake.io.readKB >= 0 {
					kb = fmt.Sprintf("%.1f", r.intake.io.readKB)
				}
				bw := "–"
				if r.intake.io.backendWrites >= 0 && r.intake.io.n > 0 {
					bw = fmt.Sprintf("%.2f", float64(r.intake.io.backendWrites)/float64(r.intake.io.n))
				}
				return kb + "; " + r.intake.io.blocksText(4) + "; " + bw
			})
		}
		if b.cfg.scaleSustain > 0 {
			line(fmt.Sprintf("intake at c=%d for %s more, in windows of %s: accepted/s each window", scaleIntakeConc, b.cfg.scaleSustain, min(scaleWindow, b.cfg.scaleSustain)), func(r scaleRow) string {
				return sustainedText(r.sustained, func(w intakeRow) string { return fmt.Sprintf("%.0f", w.res.Rate) })
			})
			line("the same windows: WAL bytes/webhook", func(r scaleRow) string {
				return sustainedText(r.sustained, func(w intakeRow) string { return cpuSplit(w.walPer) })
			})
			line("the same windows: CPU µs/webhook, cloud / database; the machine idle", func(r scaleRow) string {
				return sustainedText(r.sustained, func(w intakeRow) string {
					return cpuSplit(usPer(w.cloudCPU, w.res.Rate), usPer(w.dbCPU, w.res.Rate)) + ", " + percent(w.io.idle)
				})
			})
		}
		line(fmt.Sprintf("end to end at %d/s: p50 / p99 (load)", scaleE2ERate), func(r scaleRow) string {
			if r.e2e.arrived == 0 {
				return "–"
			}
			return fmt.Sprintf("%s / %s (%s)", ms(r.e2e.p50), ms(r.e2e.p99), loadText(r.e2eLoad))
		})
		line(fmt.Sprintf("drain of %s to one host: deliveries/s (load)", thousands(scaleDrainN)), func(r scaleRow) string {
			if r.drain.err != "" {
				return "failed: " + oneLine(r.drain.err)
			}
			if r.drain.rate == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f (%s)", r.drain.rate, loadText(r.drainLoad))
		})
		if engine == "sqlite" {
			backupLines(line)
		}
		line("pruned by retention before its phase (the fill's week kept until then)", func(r scaleRow) string {
			if r.prunedEarly < 0 {
				return "–"
			}
			return thousands(int(r.prunedEarly))
		})
		if b.cfg.scaleRetention > 0 {
			rep.retentionLines(line)
		}
		p("\n")
	}
	if slices.Contains(b.cfg.engines, "sqlite") {
		p("*Backup* (SQLite): `cloud backup FILE` run against the filled store after the drain, while a new sender posts\n")
		p("%d webhooks/s; the WAL's size read every second (a copy's snapshot holds checkpoints back). *Restore*: a second\n", scaleE2ERate)
		p("cloud started on the copy with the same keys, timed until `/readyz` answers, then asked for a delivery of the fill.\n\n")
	}
	if b.cfg.scaleRetention > 0 {
		p("*Retention*: the cloud restarted keeping acked and dead-lettered deliveries %s (`RELAY_RETAIN_ACKED`,\n", retentionKeep)
		p("`RELAY_RETAIN_DLQ`), so its first pass prunes the filled week while a new host is sent %d webhooks/s, acked,\n", scaleE2ERate)
		p("for %s, and each pass after prunes what that traffic left %s before (a pass every minute). Pruned and the\n", b.cfg.scaleRetention, retentionKeep)
		p("passes' time from the cloud's `relay_sweep_rows_total` and `relay_sweep_seconds_total`, read every second;\n")
		p("a webhook is \"during a pass\" when it was sent between the reading before the pass ended, less the pass's time,\n")
		p("and the reading after; the size as `ReadDBBytes` reads it every 5 s.\n\n")
	}
}

// backupLines are the backup phase's rows of SQLite's table.
func backupLines(line func(name string, cell func(r scaleRow) string)) {
	line(fmt.Sprintf("backup while intake ran at %d/s: took, copy's size, WAL at most (load)", scaleE2ERate), func(r scaleRow) string {
		t := r.backup
		if t.err != "" {
			return "failed: " + oneLine(t.err)
		}
		if t.took == 0 {
			return "–"
		}
		wal := "–"
		if t.walMax >= 0 {
			wal = fmt.Sprintf("%.1f MiB", float64(t.walMax)/(1<<20))
		}
		return fmt.Sprintf("%s, %.2f GiB, %s (%s)", t.took.Round(100*time.Millisecond), float64(t.bytes)/(1<<30), wal, loadText(t.load))
	})
	line("backup: intake meanwhile, p50 / p99 (non-2xx of sent)", func(r scaleRow) string {
		t := r.backup
		if t.err != "" || t.took == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s (%d of %d)", ms(t.p50), ms(t.p99), t.errs, t.sent)
	})
	line("restore: a cloud started on the copy, ready in", func(r scaleRow) string {
		t := r.backup
		if t.err != "" || t.restoreTook == 0 {
			return "–"
		}
		return t.restoreTook.Round(10 * time.Millisecond).String()
	})
}

// retentionLines are the retention phase's rows of an engine's table.
func (rep *report) retentionLines(line func(name string, cell func(r scaleRow) string)) {
	line("retention: the week pruned as intake ran: deliveries, deliveries/s", func(r scaleRow) string {
		t := r.retention
		if t.err != "" {
			return "failed: " + oneLine(t.err)
		}
		if t.backlogSeconds == 0 {
			return "–"
		}
		s := fmt.Sprintf("%s, %.0f/s", thousands(int(t.backlog)), t.backlog/t.backlogSeconds)
		if t.backlogRunning {
			s += " (the pass had not ended)"
		}
		return s
	})
	line("retention: then pruned / sent, over", func(r scaleRow) string {
		t := r.retention
		if t.err != "" || t.steadyTook == 0 {
			return "–"
		}
		return fmt.Sprintf("%s / %s, %s", thousands(int(t.steadyPruned)), thousands(t.steadySent), t.steadyTook.Round(time.Second))
	})
	line("retention: intake p50 / p99 while a pass ran, while none did (load)", func(r scaleRow) string {
		t := r.retention
		if t.err != "" || t.during+t.outside == 0 {
			return "–"
		}
		s := fmt.Sprintf("%s / %s (%d), %s / %s (%d) (%s)", ms(t.duringP50), ms(t.duringP99), t.during,
			ms(t.outsideP50), ms(t.outsideP99), t.outside, loadText(t.load))
		if t.errs > 0 {
			s += fmt.Sprintf("; %d requests failed", t.errs)
		}
		return s
	})
	line("retention: database size at the start, least, end; grown over the second half", func(r scaleRow) string {
		t := r.retention
		if t.err != "" || t.sizeStart < 0 {
			return "–"
		}
		return fmt.Sprintf("%s, %s, %s; %+.1f MiB", mib(t.sizeStart), mib(t.sizeMin), mib(t.sizeEnd), float64(t.grown)/(1<<20))
	})
}

// loadText is a load average as the report shows it.
func loadText(l float64) string {
	if l < 0 {
		return "load –"
	}
	return fmt.Sprintf("load %.1f", l)
}

// thousands writes n with thousands separated by commas.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// percent shows a share as a whole percentage, "–" where unknown.
func percent(share float64) string {
	if share < 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", share*100)
}

// sustainedText shows each window of a sustained intake, in order, "–" if
// none ran.
func sustainedText(ws []intakeRow, each func(intakeRow) string) string {
	if len(ws) == 0 {
		return "–"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = "–"
		if w.res.OK > 0 {
			parts[i] = each(w)
		}
	}
	return strings.Join(parts, "; ")
}
