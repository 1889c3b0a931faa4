package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// setup is a relay on one Postgres database: cloud replicas and hosts (with
// their receivers) created but not started.
type setup struct {
	dbURL  string
	clouds []*cloudProc
	hosts  []*relayHost
}

func (s *setup) urls() []string {
	var out []string
	for _, c := range s.clouds {
		out = append(out, c.url)
	}
	return out
}

// newSetup starts replicas `cloud serve` processes on a new database and
// creates hosts hosts, each with its own receiver.
func (e *env) newSetup(ctx context.Context, tag string, replicas, hosts int, cloudEnv ...string) (*setup, error) {
	pg, err := e.postgres(ctx)
	if err != nil {
		return nil, err
	}
	dbURL, err := pg.newDatabase(ctx, tag)
	if err != nil {
		return nil, err
	}
	return e.setupOn(ctx, dbURL, replicas, hosts, cloudEnv...)
}

// startHosts claims and runs every host of s through cloudURL, each in a
// state directory of its own.
func (e *env) startHosts(ctx context.Context, s *setup, cloudURL string) error {
	for _, h := range s.hosts {
		if err := e.startHost(ctx, h, cloudURL, e.dir(h.name)); err != nil {
			return fmt.Errorf("start %s: %w", h.name, err)
		}
	}
	return nil
}

// setupOn is newSetup on a database of the caller's (a postgres URL or
// "sqlite:PATH").
func (e *env) setupOn(ctx context.Context, dbURL string, replicas, hosts int, cloudEnv ...string) (*setup, error) {
	s := &setup{dbURL: dbURL}
	for i := range replicas {
		c, err := e.startCloud(ctx, fmt.Sprintf("cloud-%d", i), s.dbURL, cloudEnv...)
		if err != nil {
			return nil, err
		}
		s.clouds = append(s.clouds, c)
	}
	for i := range hosts {
		h, err := e.createHost(ctx, s.clouds[i%replicas].url, i)
		if err != nil {
			return nil, err
		}
		if h.rc, err = e.startReceiver(h.secret); err != nil {
			return nil, err
		}
		s.hosts = append(s.hosts, h)
	}
	return s, nil
}

// settleAndCompare waits until every delivery is acked or dead-lettered and
// compares the four records.
func (e *env) settleAndCompare(ctx context.Context, r *result, s *setup, snd *sender, timeout time.Duration, opts checkOpts) {
	t0 := time.Now()
	if _, err := waitSettled(ctx, s.urls(), s.hosts, timeout); err != nil {
		r.failf("not settled: %v", err)
	} else {
		r.figuref("settled %s after the load", time.Since(t0).Round(100*time.Millisecond))
	}
	e.compare(ctx, r, s.clouds[0].url, snd, s.hosts, opts)
}

// runCloudKill: two `cloud serve` replicas on one Postgres; every 3 s one of
// them (in turn) is SIGKILLed and started again, while the sender sends to
// both (retrying on the other) and two hosts heartbeat through a
// round-robin balancer over both.
func runCloudKill(ctx context.Context, e *env) (r result) {
	s, err := e.newSetup(ctx, "cloudkill", 2, 2, "RELAY_LEASE=10s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	lb, err := e.startBalancer(s.urls())
	if err != nil {
		r.failf("balancer: %v", err)
		return
	}
	if err := e.startHosts(ctx, s, lb.url); err != nil {
		r.failf("%v", err)
		return
	}
	n := pick(e, 5000, 1000)
	loadFor := pick(e, 50*time.Second, 15*time.Second)
	snd := newSender(s.urls(), s.hosts, "ck", n, float64(n)/loadFor.Seconds(), 60*time.Second)
	snd.start(ctx)

	kills, restartMax := 0, time.Duration(0)
	killCtx, stopKills := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-killCtx.Done():
				return
			case <-tick.C:
			}
			c := s.clouds[i%len(s.clouds)]
			c.Kill()
			kills++
			t0 := time.Now()
			if err := c.restart(ctx); err != nil {
				r.failf("restart %s: %v", c.name, err)
				return
			}
			restartMax = max(restartMax, time.Since(t0))
			e.logf("killed and restarted %s (%d sent)", c.name, snd.started.Load())
		}
	})
	snd.wait()
	stopKills()
	wg.Wait()
	r.figuref("%d SIGKILLs (restart ≤ %s), host requests per replica %s", kills, restartMax.Round(10*time.Millisecond), lb.counts())
	e.settleAndCompare(ctx, &r, s, snd, pick(e, 120*time.Second, 60*time.Second), checkOpts{})
	return r
}

// runPostgresKill: Postgres is stopped the hard way (pg_ctl stop -m
// immediate) mid-load and started again on the same port. While it is down
// the intake must answer only 5xx (or fail to answer); no 2xx may be lost.
func runPostgresKill(ctx context.Context, e *env) (r result) {
	s, err := e.newSetup(ctx, "pgkill", 1, 2, "RELAY_LEASE=10s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	if err := e.startHosts(ctx, s, s.clouds[0].url); err != nil {
		r.failf("%v", err)
		return
	}
	loadFor := pick(e, 40*time.Second, 16*time.Second)
	rate := 50.0
	snd := newSender(s.urls(), s.hosts, "pk", int(rate*loadFor.Seconds()), rate, 90*time.Second)
	// Like a provider, keep starting new events while earlier ones are being
	// retried, so that every event of the outage meets it.
	snd.workers = 400
	snd.start(ctx)

	time.Sleep(loadFor / 4)
	pg := e.pg
	killAt := time.Now()
	if err := pg.kill(ctx); err != nil {
		r.failf("%v", err)
		return
	}
	down := time.Now()
	restarted := false
	e.onCleanup(func() {
		if !restarted { // the scenario stopped early: the next ones need it
			_ = pg.start(context.Background())
		}
	})
	e.logf("postgres killed (pg_ctl took %s)", down.Sub(killAt).Round(time.Millisecond))
	time.Sleep(pick(e, 8*time.Second, 4*time.Second))
	upBegin := time.Now()
	if err := pg.start(ctx); err != nil {
		r.failf("%v", err)
		return
	}
	up := time.Now()
	restarted = true
	e.logf("postgres started again (%s)", up.Sub(upBegin).Round(time.Millisecond))
	snd.wait()

	// While it was down: only 5xx or no answer. A request sent after the
	// kill finished and answered before the restart began cannot have been
	// stored by anyone.
	var ok2xx, s5xx, s4xx, noAnswer int
	var firstOK time.Time
	for _, t := range snd.tries() {
		if t.sent.After(down) && t.done.Before(upBegin) {
			switch {
			case t.status == 0:
				noAnswer++
			case t.status >= 200 && t.status < 300:
				ok2xx++
			case t.status >= 500:
				s5xx++
			default:
				s4xx++
			}
		}
		if t.sent.After(upBegin) && t.status >= 200 && t.status < 300 && (firstOK.IsZero() || t.done.Before(firstOK)) {
			firstOK = t.done
		}
	}
	r.figuref("down %s: %d answered 5xx, %d unanswered, %d 2xx, %d 4xx", upBegin.Sub(down).Round(100*time.Millisecond), s5xx, noAnswer, ok2xx, s4xx)
	if ok2xx > 0 {
		r.failf("%d requests answered 2xx while Postgres was down", ok2xx)
	}
	if s4xx > 0 {
		r.failf("%d requests answered 4xx while Postgres was down (a provider drops those)", s4xx)
	}
	if s5xx+noAnswer == 0 {
		r.failf("no request hit the outage: the fault did not bite")
	}
	if firstOK.IsZero() {
		r.failf("no 2xx after Postgres came back")
	} else {
		// pg_ctl start -w returns a little after the server accepts
		// connections: recovery counts from when the start began.
		rec := firstOK.Sub(upBegin)
		r.figuref("intake answered 2xx again %s after the restart began (pg_ctl start -w took %s)", rec.Round(10*time.Millisecond), up.Sub(upBegin).Round(10*time.Millisecond))
		if rec > 15*time.Second {
			r.failf("intake took %s to recover after Postgres was back", rec.Round(100*time.Millisecond))
		}
	}
	e.settleAndCompare(ctx, &r, s, snd, pick(e, 120*time.Second, 60*time.Second), checkOpts{})
	return r
}

// runHostKill: the webhooks are sent while two hosts are down; then both
// drain them while each is SIGKILLed at random points (every 0.3–2 s) and
// started again at once. Their receivers take 30–80 ms per webhook, so a
// kill often lands mid-handler.
func runHostKill(ctx context.Context, e *env) result {
	return runHostFaults(ctx, e, hostFaults{tag: "hostkill", prefix: "hk", what: "host SIGKILLs",
		fault: (*relayHost).killAndRestart, check: checkOpts{explain: killBetween}})
}

// runHostRestarts: as runHostKill, but the hosts are stopped as a deploy
// stops them (SIGTERM, then a restart). A graceful stop finishes what runs
// and hands back what has not started, so every webhook is handled exactly
// once (no at-least-once window to explain), and none spends an attempt on
// a stop: each source allows one attempt alone, so an attempt spent by a
// restart dead-letters its webhook and fails the scenario.
func runHostRestarts(ctx context.Context, e *env) result {
	return runHostFaults(ctx, e, hostFaults{tag: "hostrestart", prefix: "hr", what: "graceful host restarts",
		oneAttempt: true, fault: (*relayHost).stopAndRestart})
}

// hostFaults is what a host-fault scenario does to its hosts.
type hostFaults struct {
	tag, prefix string // the database's and the events' names
	what        string // the faults, as the figure says them
	oneAttempt  bool   // the sources allow one attempt alone
	fault       func(*relayHost) error
	check       checkOpts
}

// runHostFaults sends the webhooks while two hosts are down, then lets
// both drain them while f.fault strikes each at random points (every
// 0.3–2 s), until their receivers got every one; then compares the
// records. Their receivers take 30–80 ms per webhook.
func runHostFaults(ctx context.Context, e *env, f hostFaults) (r result) {
	s, err := e.newSetup(ctx, f.tag, 1, 2, "RELAY_LEASE=5s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	if f.oneAttempt {
		for _, h := range s.hosts {
			if err := admin(ctx, s.clouds[0].url, "PUT", "/api/hosts/"+h.id+"/sources/github", map[string]any{
				"secrets": []string{h.secret}, "retry_schedule_s": []int{0}, "max_attempts": 1, "options": replayGuardOff,
			}, nil, 200); err != nil {
				r.failf("one attempt for %s: %v", h.name, err)
				return
			}
		}
	}
	n := pick(e, 5000, 1000)
	snd := newSender(s.urls(), s.hosts, f.prefix, n, 0, 60*time.Second)
	snd.start(ctx)
	snd.wait()
	ok, _, _ := snd.summary()
	for _, h := range s.hosts {
		h.rc.delay = func() time.Duration { return e.randDur(30*time.Millisecond, 80*time.Millisecond) }
	}
	if err := e.startHosts(ctx, s, s.clouds[0].url); err != nil {
		r.failf("%v", err)
		return
	}
	t0 := time.Now()
	faultCtx, stopFaults := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	faults := 0
	for _, h := range s.hosts {
		wg.Go(func() {
			for {
				select {
				case <-faultCtx.Done():
					return
				case <-time.After(e.randDur(300*time.Millisecond, 2*time.Second)):
				}
				if err := f.fault(h); err != nil {
					mu.Lock()
					r.failf("restart %s: %v", h.name, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				faults++
				mu.Unlock()
			}
		})
	}
	// Keep striking while the hosts drain: until their receivers got every
	// event (the last ones may still be unacked) or the drain times out.
	_ = waitFor(ctx, pick(e, 240*time.Second, 60*time.Second), 100*time.Millisecond, "drained", func() bool {
		got := 0
		for _, h := range s.hosts {
			got += len(h.rc.snapshot())
		}
		return got >= ok
	})
	stopFaults()
	wg.Wait()
	for _, h := range s.hosts {
		if err := h.waitUp(ctx); err != nil {
			r.failf("%s: %v", h.name, err)
		}
	}
	r.figuref("%d %s while draining for %s", faults, f.what, time.Since(t0).Round(100*time.Millisecond))
	e.settleAndCompare(ctx, &r, s, snd, pick(e, 120*time.Second, 60*time.Second), f.check)
	return r
}

// runNetworkFaults: each host reaches the cloud through its own toxiproxy
// link; the links get latency, then connection resets, then stalls that
// time out, then a partition, while webhooks keep coming.
func runNetworkFaults(ctx context.Context, e *env) (r result) {
	s, err := e.newSetup(ctx, "netfault", 1, 2, "RELAY_LEASE=10s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	var links []*link
	for _, h := range s.hosts {
		l, err := e.startLink(h.name, s.clouds[0].addr)
		if err != nil {
			r.failf("toxiproxy: %v", err)
			return
		}
		links = append(links, l)
		if err := e.startHost(ctx, h, l.url(), e.dir(h.name)); err != nil {
			r.failf("start %s: %v", h.name, err)
			return
		}
	}
	type phase struct {
		name     string
		kind     string
		toxicity float64
		attrs    string
		length   time.Duration
	}
	phases := []phase{
		{"latency 300±200 ms", "latency", 1, `{"latency": 300, "jitter": 200}`, pick(e, 20*time.Second, 4*time.Second)},
		{"reset_peer", "reset_peer", 0.5, `{"timeout": 200}`, pick(e, 15*time.Second, 4*time.Second)},
		{"stalls timing out", "timeout", 0.5, `{"timeout": 1500}`, pick(e, 15*time.Second, 4*time.Second)},
		{"partition", "timeout", 1, `{"timeout": 0}`, pick(e, 60*time.Second, 8*time.Second)},
	}
	total := time.Duration(0)
	for _, p := range phases {
		total += p.length
	}
	rate := 25.0
	snd := newSender(s.urls(), s.hosts, "nf", int(rate*(total+4*time.Second).Seconds()), rate, 60*time.Second)
	snd.start(ctx)
	time.Sleep(2 * time.Second)
	var notes []string
	for _, p := range phases {
		before := ackedOf(ctx, s)
		for _, l := range links {
			if err := l.add(p.kind, p.toxicity, p.attrs); err != nil {
				r.failf("%v", err)
				return
			}
		}
		e.logf("link fault: %s for %s", p.name, p.length)
		// What crossed the link before it was cut (a report a socket
		// wrote a moment before) is applied in the cut's first second:
		// acks through a partition are counted from then on.
		cut := before
		if p.name == "partition" {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			cut = ackedOf(ctx, s)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.length):
		}
		after := ackedOf(ctx, s)
		for _, l := range links {
			if err := l.clear(); err != nil {
				r.failf("heal: %v", err)
				return
			}
		}
		notes = append(notes, fmt.Sprintf("%s %s: %d acked", p.name, p.length, after-before))
		if p.name == "partition" && after != cut {
			r.failf("%d deliveries acked through a partitioned link", after-cut)
		}
	}
	snd.wait()
	r.figuref("%s", strings.Join(notes, ", "))
	e.settleAndCompare(ctx, &r, s, snd, pick(e, 120*time.Second, 60*time.Second), checkOpts{})
	return r
}

// ackedOf counts the acked deliveries of s's hosts.
func ackedOf(ctx context.Context, s *setup) int {
	counts, err := hostCounts(ctx, s.clouds[0].url)
	if err != nil {
		return -1
	}
	n := 0
	for _, h := range s.hosts {
		n += counts[h.id]["acked"]
	}
	return n
}

// runDiskFull: the first host's state directory (its ledger) is a small
// tmpfs; it is filled up while webhooks keep coming, then freed. The host
// must never ack what it could not record, and must deliver everything
// once space returns.
func runDiskFull(ctx context.Context, e *env) (r result) {
	s, err := e.newSetup(ctx, "diskfull", 1, 2, "RELAY_LEASE=5s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	mnt := e.dir("ledger-tmpfs")
	if out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", "size=24m,mode=0755", "tmpfs", mnt).CombinedOutput(); err != nil {
		r.skipped = fmt.Sprintf("needs root/mount (mount -t tmpfs: %v: %s)", err, strings.TrimSpace(string(out)))
		return
	}
	e.onCleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	full := s.hosts[0]
	for i, h := range s.hosts {
		state := e.dir(h.name)
		if i == 0 {
			state = filepath.Join(mnt, "state")
			_ = os.MkdirAll(state, 0o700)
		}
		if err := e.startHost(ctx, h, s.clouds[0].url, state); err != nil {
			r.failf("start %s: %v", h.name, err)
			return
		}
	}
	fullFor := pick(e, 30*time.Second, 12*time.Second)
	rate := 30.0
	snd := newSender(s.urls(), s.hosts, "df", int(rate*(fullFor+8*time.Second).Seconds()), rate, 90*time.Second)
	snd.start(ctx)
	time.Sleep(3 * time.Second)

	filler := filepath.Join(mnt, "filler")
	if err := fillDisk(filler); err != nil {
		r.failf("fill: %v", err)
		return
	}
	e.logf("ledger disk full")
	fullAt := time.Now()
	exits := 0
	ackedBefore := hostAcked(ctx, s, full)
	for time.Since(fullAt) < fullFor {
		time.Sleep(250 * time.Millisecond)
		if !full.run.Running() {
			// The host gave up on a full disk: a supervisor restarts it.
			exits++
			_ = full.run.Start()
		}
		// Keep the disk full: SQLite may free pages meanwhile.
		_ = fillDisk(filler + "2")
	}
	ackedDuring := hostAcked(ctx, s, full) - ackedBefore
	os.Remove(filler)
	os.Remove(filler + "2")
	e.logf("ledger disk freed")
	snd.wait()
	if !full.run.Running() {
		exits++
		_ = full.run.Start()
	}
	if err := full.waitUp(ctx); err != nil {
		r.failf("%s: %v", full.name, err)
	}

	recordFails := logDeliveries(full.run.LogPath, "recording the outcome failed")
	r.figuref("disk full %s: %d acked meanwhile, %d outcomes the ledger could not record, host exited %d times",
		fullFor, ackedDuring, len(recordFails), exits)
	if len(recordFails) == 0 && ackedDuring > 0 {
		r.failf("the fault did not bite: no ledger write failed while the disk was full")
	}
	explain := func(h *relayHost, key string, arr []arrival) string {
		if h == full && recordFails[key] >= len(arr)-1 {
			return "its outcome could not be recorded (disk full)"
		}
		return killBetween(h, key, arr)
	}
	e.settleAndCompare(ctx, &r, s, snd, pick(e, 120*time.Second, 60*time.Second), checkOpts{explain: explain})
	most, key := 0, ""
	for k, arr := range full.rc.snapshot() {
		if len(arr) > most {
			most, key = len(arr), k
		}
	}
	r.figuref("most runs of one delivery on the full disk: %d (%s)", most, key)
	return r
}

// hostAcked is how many of h's deliveries are acked.
func hostAcked(ctx context.Context, s *setup, h *relayHost) int {
	counts, err := hostCounts(ctx, s.clouds[0].url)
	if err != nil {
		return 0
	}
	return counts[h.id]["acked"]
}

// fillDisk writes zeros to path until the file system is full.
func fillDisk(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		if isNoSpace(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if isNoSpace(err) {
				break
			}
			return err
		}
	}
	// The last bytes, a page at a time.
	small := buf[:4096]
	for {
		if _, err := f.Write(small); err != nil {
			break
		}
	}
	return nil
}

func isNoSpace(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no space left") || errors.Is(err, syscall.ENOSPC))
}

var deliveryAttr = regexp.MustCompile(`delivery_id=(\S+)`)

// logDeliveries counts the log lines containing msg by delivery id.
func logDeliveries(path, msg string) map[string]int {
	b, _ := os.ReadFile(path)
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		if m := deliveryAttr.FindStringSubmatch(line); m != nil {
			out[strings.Trim(m[1], `"`)]++
		}
	}
	return out
}
