package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/relaykit/relay/scripts/internal/rig"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// intakeRow is one intake run's figures.
type intakeRow struct {
	engine            string
	conc              int
	res               loadResult
	p50, p99, p999    time.Duration
	cloudCPU, selfCPU float64
	dbCPU             float64
	cloudPeak         int64
	mem               memSplit
	// Bytes per webhook stored: the database's growth, and (Postgres) its
	// WAL written; -1 where unknown (rig.DBBytes).
	dbGrowth, walPer float64
	// io: where the machine's and the database's time went (ioMeter).
	io ioFigures
	// A group's run (group-intake): its members, each a delivery of every
	// webhook (fanout).
	members int
	err     string
}

func (b *bench) intake(engine string, conc int) intakeRow {
	row := intakeRow{engine: engine, conc: conc}
	r, err := b.newRun(engine, fmt.Sprintf("intake%d", conc))
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	return r.measureIntake(row, r.sender(conc), "intake")
}

// measureIntake runs the closed loop of an intake run with s (after the
// warm-up) and fills in row's figures; what names the run in the log.
func (r *run) measureIntake(row intakeRow, s *sender, what string) intakeRow {
	return r.measureIntakeFor(row, s, r.b.cfg.warmup, r.b.cfg.intakeDuration, what)
}

// measureIntakeFor is measureIntake with a warm-up and a run of the given
// lengths (no warm-up if 0).
func (r *run) measureIntakeFor(row intakeRow, s *sender, warmup, d time.Duration, what string) intakeRow {
	b, conc, engine := r.b, row.conc, row.engine
	if warmup > 0 {
		s.closedLoop(b.ctx, conc, warmup, 0)
	}
	bytes0, bytesErr := rig.ReadDBBytes(b.ctx, r.dbURL)
	iom := b.startIO(engine, r.dbURL)
	cpu, self, db := startCPU(r.cloud.Proc), startSelfCPU(), b.startDBCPU(engine)
	row.res = s.closedLoop(b.ctx, conc, d, 0)
	row.cloudCPU, row.selfCPU, row.dbCPU = cpu.share(), self.share(), db.share()
	row.io = iom.stop(b.ctx, row.res.OK-row.res.Dups)
	row.dbGrowth, row.walPer = -1, -1
	if bytes1, err := rig.ReadDBBytes(b.ctx, r.dbURL); err == nil && bytesErr == nil {
		row.dbGrowth, row.walPer = bytesPer(bytes0, bytes1, row.res.OK-row.res.Dups)
	} else {
		logf("%s %s: database size: %v", what, engine, errors.Join(bytesErr, err))
	}
	p := newPercentiles(row.res.Lat)
	row.p50, row.p99, row.p999 = p.at(0.50), p.at(0.99), p.at(0.999)
	row.cloudPeak = r.cloudPeak()
	row.mem = r.cloudMemory()
	logf("%s %s c=%d: %.0f/s p50 %s p99 %s errors %d+%d; CPU µs/webhook cloud %.0f, database %.0f; database +%.0f B/webhook, WAL %.0f B/webhook; machine idle %.2f, iowait %.2f; server read %.1f KiB/webhook from storage; blocks read into the buffer cache a webhook: %s; buffers written out by backends %d",
		what, engine, conc, row.res.Rate, ms(row.p50), ms(row.p99), row.res.BadStatus, row.res.Transport,
		usPer(row.cloudCPU, row.res.Rate), usPer(row.dbCPU, row.res.Rate), row.dbGrowth, row.walPer,
		row.io.idle, row.io.iowait, row.io.readKB, row.io.blocksText(6), row.io.backendWrites)
	if row.res.OK == 0 {
		row.err = r.fail(fmt.Errorf("no webhook accepted"))
	}
	return row
}

// bytesPer is what the database grew (its size) and wrote to its
// write-ahead log between two readings, per webhook stored; -1 where
// unknown (no webhook, no WAL position on SQLite).
func bytesPer(from, to rig.DBBytes, stored int) (growth, wal float64) {
	if stored <= 0 {
		return -1, -1
	}
	growth, wal = float64(to.Size-from.Size)/float64(stored), -1
	if from.WAL >= 0 && to.WAL >= from.WAL {
		wal = float64(to.WAL-from.WAL) / float64(stored)
	}
	return growth, wal
}

// startSelfCPU measures this process (the load generator).
func startSelfCPU() *cpuMeter {
	m := &cpuMeter{pid: os.Getpid()}
	m.first, m.err = rig.ReadProc(m.pid)
	return m
}

// ---- 2. latency under steady load ----

type latencyRow struct {
	engine              string
	rate                int
	res                 loadResult
	p50, p99, p999, max time.Duration
	cloudCPU, dbCPU     float64
	cloudPeak           int64
	err                 string
}

func (b *bench) latency(engine string, rate int) latencyRow {
	row := latencyRow{engine: engine, rate: rate}
	r, err := b.newRun(engine, fmt.Sprintf("latency%d", rate))
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	s := r.sender(b.cfg.latencyMaxIn)
	if b.cfg.warmup > 0 {
		s.openLoop(b.ctx, float64(rate), b.cfg.warmup, b.cfg.latencyMaxIn, nil, nil)
	}
	cpu, db := startCPU(r.cloud.Proc), b.startDBCPU(engine)
	row.res = s.openLoop(b.ctx, float64(rate), b.cfg.latencyDur, b.cfg.latencyMaxIn, nil, nil)
	row.cloudCPU, row.dbCPU = cpu.share(), db.share()
	p := newPercentiles(row.res.Lat)
	row.p50, row.p99, row.p999, row.max = p.at(0.50), p.at(0.99), p.at(0.999), p.max()
	row.cloudPeak = r.cloudPeak()
	logf("latency %s %d/s: achieved %.0f/s p50 %s p99 %s max %s errors %d+%d", engine, rate, row.res.Rate, ms(row.p50), ms(row.p99), ms(row.max), row.res.BadStatus, row.res.Transport)
	if row.res.OK == 0 {
		row.err = r.fail(fmt.Errorf("no webhook accepted"))
	}
	return row
}

// ---- 3. drain ----

type drainRow struct {
	engine              string
	transport           string
	queued              int
	insertRate          float64
	insertErrors        int
	toForward, toAck    time.Duration
	rate                float64 // deliveries acked per second from host start
	duplicates          int
	cloudPeak, hostPeak int64
	// CPU per acked delivery, µs, from the host's start (-1 if unknown):
	// what bounds the rate at cores/cpu on a machine of that many cores.
	cloudUS, hostUS, dbUS, recvUS float64
	err                           string
}

// cpuPer is the CPU a process used since from, in µs per n (-1 if unknown).
func cpuPer(from rig.ProcSample, fromErr error, pid, n int) float64 {
	to, err := rig.ReadProc(pid)
	if fromErr != nil || err != nil || n == 0 {
		return -1
	}
	return float64(to.CPUTicks()-from.CPUTicks()) / rig.ClockTicks * 1e6 / float64(n)
}

func (b *bench) drain(engine, transport string) drainRow {
	row := drainRow{engine: engine, transport: transport}
	r, err := b.newRun(engine, "drain_"+transport)
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	return r.measureDrain(row, b.cfg.drainN)
}

// measureDrain queues n deliveries for the run's host (not running), then
// starts it and fills in row's figures of the drain.
func (r *run) measureDrain(row drainRow, n int) drainRow {
	b, engine, transport := r.b, row.engine, row.transport
	s := r.sender(b.cfg.drainConc)
	logf("drain %s: queuing %d deliveries", engine, n)
	res := s.closedLoop(b.ctx, b.cfg.drainConc, 24*time.Hour, int64(n))
	row.queued, row.insertRate, row.insertErrors = res.OK, res.Rate, res.BadStatus+res.Transport
	logf("drain %s: queued %d at %.0f/s (%d replays, %d errors)", engine, res.OK-res.Dups, res.Rate, res.Dups, row.insertErrors)
	row.queued -= res.Dups // answered 200, stored once
	if counts, err := r.cloud.Counts(b.ctx, r.hostID); err != nil || counts["queued"] != row.queued {
		if err == nil {
			err = fmt.Errorf("cloud counts %v after %d accepted (%d of them replays)", counts, res.OK, res.Dups)
		}
		row.err = r.fail(err)
		return row
	}

	// Claim first, so the clock starts with the host process.
	state := r.hostDir()
	if err := rig.ClaimHost(b.ctx, b.bins.Host, r.cloud.URL, r.code, state); err != nil {
		row.err = r.fail(err)
		return row
	}
	r.code = ""
	rc, err := rig.StartReceiver(rig.ReceiverOptions{})
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	r.recv = rc
	cloud0, cloudErr := rig.ReadProc(r.cloud.PID())
	self0, selfErr := rig.ReadProc(os.Getpid())
	db := b.startDBCPU(engine)
	start := time.Now()
	h, err := rig.StartHost(b.ctx, rig.HostConfig{Bin: b.bins.Host, CloudURL: r.cloud.URL, StateDir: state,
		Config: withTransport(b.hostConfig(rc.URL, true, b.cfg.drainWorkers), transport)})
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	r.host = h
	// Every delivery at the receiver (cheap to watch), then every ack at the
	// cloud (it comes with the host's next heartbeat).
	timeout := 10*time.Minute + time.Duration(row.queued)*10*time.Millisecond
	err = rig.WaitFor(b.ctx, timeout, 5*time.Millisecond, "every delivery forwarded", func() (bool, error) {
		if !h.Running() {
			return false, fmt.Errorf("host exited")
		}
		return rc.Unique() >= row.queued, nil
	})
	if err != nil {
		row.err = r.fail(fmt.Errorf("%w (%d of %d forwarded)", err, rc.Unique(), row.queued))
		return row
	}
	row.toForward = time.Since(start)
	err = rig.WaitFor(b.ctx, 2*time.Minute, 50*time.Millisecond, "every delivery acked", func() (bool, error) {
		counts, err := r.cloud.Counts(b.ctx, r.hostID)
		return counts["acked"] >= row.queued, err
	})
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	row.toAck = time.Since(start)
	row.rate = float64(row.queued) / row.toAck.Seconds()
	row.cloudUS = cpuPer(cloud0, cloudErr, r.cloud.PID(), row.queued)
	row.hostUS = cpuPer(rig.ProcSample{}, nil, h.PID(), row.queued)
	row.recvUS = cpuPer(self0, selfErr, os.Getpid(), row.queued)
	row.dbUS = db.usPer(row.queued) // nil on SQLite: -1
	row.duplicates = rc.Duplicates()
	row.cloudPeak, row.hostPeak = r.cloudPeak(), r.hostPeak()
	logf("drain %s %s: %d in %s (last forward at %s): %.0f/s, %d duplicates; CPU µs per delivery: cloud %.0f, database %.0f, host %.0f, receiver %.0f",
		engine, transport, row.queued, row.toAck.Round(time.Millisecond), row.toForward.Round(time.Millisecond), row.rate, row.duplicates,
		row.cloudUS, row.dbUS, row.hostUS, row.recvUS)
	return row
}

// ---- 4. end to end ----

type e2eRow struct {
	engine              string
	mode                string
	transport           string
	intakeP50, afterP50 time.Duration // POST to the intake's answer; that answer to the handler
	rate                float64
	sent, arrived       int
	errors              int
	p50, p99, max       time.Duration
	// smallP50, smallP99: the webhooks under bigBody alone (the mix
	// without its 300 KB push, 1 % of it: were those the slowest, they
	// alone would make the whole's p99).
	smallP50, smallP99  time.Duration
	cloudPeak, hostPeak int64
	steps               string // the median of each step (stepTimes)
	tailSteps           string // the same of the slowest 1 %
	err                 string
}

func (b *bench) e2e(engine, mode, transport string, rate float64) e2eRow {
	row := e2eRow{engine: engine, mode: mode, transport: transport, rate: rate}
	// Each webhook carries the times of its steps (shared/steptime) to
	// the receiver: where the time goes.
	stepEnv := steptime.Env + "=1"
	r, err := b.newRun(engine, fmt.Sprintf("e2e_%s_%s_%g", mode, transport, rate), stepEnv)
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	return r.measureE2E(row, stepEnv)
}

// measureE2E starts the run's host (env added to its environment) and
// fills in row's figures of the end-to-end run.
func (r *run) measureE2E(row e2eRow, env ...string) e2eRow {
	b, engine, mode, transport, rate := r.b, row.engine, row.mode, row.transport, row.rate
	parallel, workers := false, 0
	if mode == "parallel" {
		parallel, workers = true, b.cfg.e2eWorkers
	}
	if err := r.startHost(parallel, workers, transport, env...); err != nil {
		row.err = r.fail(err)
		return row
	}
	s := r.sender(64)
	// Warm up until the host is in its steady state: a host that just
	// started reports its subscription first and long-polls one heartbeat
	// floor (1 s) later, which is not what this measures.
	warm := 0
	if b.cfg.warmup > 0 {
		res := s.openLoop(b.ctx, rate, b.cfg.warmup, 64, nil, nil)
		warm = res.OK - res.Dups
		err := rig.WaitFor(b.ctx, 60*time.Second, 20*time.Millisecond, "the warm-up webhooks at the receiver", func() (bool, error) {
			return r.recv.Unique() >= warm, nil
		})
		if err != nil {
			row.err = r.fail(err)
			return row
		}
	}
	total := int(rate * b.cfg.e2eDuration.Seconds())
	var mu sync.Mutex
	sentAt := make(map[string]time.Time, total)
	big := make(map[string]bool)
	answeredAt := make(map[string]time.Time, total)
	res := s.openLoop(b.ctx, rate, b.cfg.e2eDuration, 64, func(id string, size int, at time.Time) {
		mu.Lock()
		sentAt[id] = at
		if size >= bigBody {
			big[id] = true
		}
		mu.Unlock()
	}, func(id string, at time.Time) {
		mu.Lock()
		answeredAt[id] = at
		mu.Unlock()
	})
	row.sent, row.errors = res.OK-res.Dups, res.BadStatus+res.Transport
	err := rig.WaitFor(b.ctx, 60*time.Second, 20*time.Millisecond, "every webhook at the receiver", func() (bool, error) {
		return r.recv.Unique() >= warm+row.sent, nil
	})
	if err != nil {
		r.fail(fmt.Errorf("%w (%d of %d arrived)", err, r.recv.Unique()-warm, row.sent))
	}
	// Where the time goes: the POST until the intake's answer (verified,
	// committed) and from that answer to the handler — which the push or
	// the long poll's answer may beat, since both follow the commit.
	var lat, small, intake, after []time.Duration
	steps := newStepTimes()
	hits := r.recv.Snapshot()
	for key, hit := range hits {
		i := eventIDOf(key)
		if at, ok := sentAt[i]; ok {
			lat = append(lat, hit.First.Sub(at))
			if !big[i] {
				small = append(small, hit.First.Sub(at))
			}
			steps.add(at, answeredAt[i], hit)
			if ans, ok := answeredAt[i]; ok {
				intake = append(intake, ans.Sub(at))
				after = append(after, hit.First.Sub(ans))
			}
		}
	}
	row.arrived = len(lat)
	p := newPercentiles(lat)
	row.p50, row.p99, row.max = p.at(0.50), p.at(0.99), p.max()
	ps := newPercentiles(small)
	row.smallP50, row.smallP99 = ps.at(0.50), ps.at(0.99)
	row.intakeP50, row.afterP50 = newPercentiles(intake).at(0.50), newPercentiles(after).at(0.50)
	row.cloudPeak, row.hostPeak = r.cloudPeak(), r.hostPeak()
	logf("e2e %s %s %s %g/s: %d sent, %d arrived, p50 %s p99 %s max %s (under %d KiB: p50 %s p99 %s; p50 POST → answer %s, answer → handler %s)", engine, mode, transport, rate, row.sent, row.arrived,
		ms(row.p50), ms(row.p99), ms(row.max), bigBody>>10, ms(row.smallP50), ms(row.smallP99), ms(row.intakeP50), signedMS(row.afterP50))
	row.steps = steps.medians()
	logf("e2e %s %s %s %g/s: median of each step, ms: %s", engine, mode, transport, rate, row.steps)
	// The tail: where the time of the slowest 1 % goes.
	tail := newStepTimes()
	for key, hit := range hits {
		if at, ok := sentAt[eventIDOf(key)]; ok && hit.First.Sub(at) >= row.p99 {
			tail.add(at, answeredAt[eventIDOf(key)], hit)
		}
	}
	row.tailSteps = tail.medians()
	logf("e2e %s %s %s %g/s: the slowest 1 %%, median of each step, ms: %s", engine, mode, transport, rate, row.tailSteps)
	// The slowest few one by one: a median of the tail hides when its
	// webhooks took different paths.
	type slow struct {
		d    time.Duration
		path string
	}
	var slowest []slow
	for key, hit := range hits {
		if at, ok := sentAt[eventIDOf(key)]; ok && hit.First.Sub(at) >= row.p99 {
			slowest = append(slowest, slow{hit.First.Sub(at), stepPath(at, answeredAt[eventIDOf(key)], hit)})
		}
	}
	sort.Slice(slowest, func(i, j int) bool { return slowest[i].d > slowest[j].d })
	for _, s := range slowest[:min(len(slowest), 5)] {
		logf("e2e %s %s %s %g/s: slow webhook, %s ms: %s", engine, mode, transport, rate, ms(s.d), s.path)
	}
	return row
}

// bigBody splits the end-to-end latencies: bodies of this size or more
// (the mix's 300 KB push) take the time their bytes take to read, hash,
// store, send and forward, and being 1 % of the mix they could make its
// p99 on their own.
const bigBody = 64 << 10

// eventIDOf is the event id in a delivery id, {source}:{event_id}:{ms}.
func eventIDOf(deliveryID string) string {
	_, rest, _ := strings.Cut(deliveryID, ":")
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// ---- 5. idle hosts ----

type idleRow struct {
	engine     string
	transport  string
	hosts      int
	setup      time.Duration
	sent       int // heartbeats sent in the window
	heartbeats int // heartbeats answered 200 in the window
	errors     int
	window     time.Duration
	cloudCPU   float64
	cloudPeak  int64
	perHost    int64 // the cloud's resident set grown per host, bytes
	err        string
}

func (b *bench) idle(engine, transport string) idleRow {
	row := idleRow{engine: engine, transport: transport, hosts: b.cfg.idleHosts}
	// Each host holds a descriptor here and one in the cloud. Go raises
	// its soft limit to the hard one when it starts; past that, say so
	// rather than count refused sockets as the cloud's errors.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(b.cfg.idleHosts)+256 {
		logf("idle: the open-file limit (%d) is below -idle-hosts %d and a margin: raise ulimit -n (hard), or expect errors", lim.Cur, b.cfg.idleHosts)
	}
	r, err := b.newRun(engine, "idle_"+transport)
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()

	// Create and claim every host through the API, 16 at a time.
	setup := time.Now()
	tokens := make([]string, b.cfg.idleHosts)
	var (
		next    atomic.Int64
		firstMu sync.Mutex
		first   error
		wg      sync.WaitGroup
	)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tokens) || ctx.Err() != nil {
					return
				}
				h, err := r.cloud.CreateHost(ctx, fmt.Sprintf("idle-%d", i))
				var cl shared.ClaimResponse
				if err == nil {
					cl, err = r.cloud.Claim(ctx, h.ClaimCode)
				}
				if err != nil {
					firstMu.Lock()
					if first == nil {
						first = err
					}
					firstMu.Unlock()
					cancel()
					return
				}
				tokens[i] = cl.Token
			}
		}()
	}
	wg.Wait()
	if first != nil {
		row.err = r.fail(fmt.Errorf("creating hosts: %w", first))
		return row
	}
	row.setup = time.Since(setup)
	logf("idle %s: %d hosts created and claimed in %s", engine, len(tokens), row.setup.Round(time.Millisecond))
	before, _ := rig.ReadProc(r.cloud.PID())
	if transport == "websocket" {
		return b.idleSockets(ctx, cancel, r, row, tokens, before.VmRSS)
	}

	// Each host heartbeats once per interval, the hosts spread evenly over
	// it; with wait_s the cloud holds each heartbeat, as it does a real
	// idle host's.
	admin := rig.NewAdmin(r.cloud.URL, r.cloud.Token)
	admin.Client.Transport = newTransport(len(tokens))
	admin.Client.Timeout = time.Duration(b.cfg.idleWait)*time.Second + 30*time.Second
	var sent, beats, errs atomic.Int64
	interval := b.cfg.idleInterval
	start := time.Now()
	req := shared.HeartbeatRequest{AgentVersion: "bench", WaitS: b.cfg.idleWait}
	var hb sync.WaitGroup
	for i, tok := range tokens {
		hb.Add(1)
		go func() {
			defer hb.Done()
			due := start.Add(interval * time.Duration(i) / time.Duration(len(tokens)))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(due)):
				}
				sent.Add(1)
				if _, err := admin.Heartbeat(ctx, tok, req); err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
				} else {
					beats.Add(1)
				}
				due = due.Add(interval)
			}
		}()
	}
	cpu := startCPU(r.cloud.Proc)
	select {
	case <-b.ctx.Done():
	case <-time.After(b.cfg.idleDuration):
	}
	row.cloudCPU = cpu.share()
	row.window = time.Since(start)
	row.sent, row.heartbeats, row.errors = int(sent.Load()), int(beats.Load()), int(errs.Load())
	row.cloudPeak = r.cloudPeak()
	if after, err := rig.ReadProc(r.cloud.PID()); err == nil && before.VmRSS > 0 {
		row.perHost = (after.VmRSS - before.VmRSS) / int64(len(tokens))
	}
	cancel()
	hb.Wait()
	admin.Client.CloseIdleConnections()
	logf("idle %s: %d heartbeats answered in %s, %d errors, cloud CPU %.1f%% of a core", engine, row.heartbeats, row.window.Round(time.Second), row.errors, row.cloudCPU*100)
	return row
}

// idleSockets keeps a socket open for each host (hello with credit, then
// reading, which answers the cloud's pings) and measures the cloud's CPU
// over the idle window and its memory per socket.
func (b *bench) idleSockets(ctx context.Context, cancel context.CancelFunc, r *run, row idleRow, tokens []string, before int64) idleRow {
	u := "ws" + strings.TrimPrefix(r.cloud.URL, "http") + shared.PathSocket
	hello, _ := json.Marshal(shared.Frame{Type: shared.FrameHello, AgentVersion: "bench", Credit: 32, RawBodyOnly: true, BinaryWebhooks: true})
	var (
		open, errs atomic.Int64
		next       atomic.Int64
		wg, conns  sync.WaitGroup
	)
	start := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tokens) || ctx.Err() != nil {
					return
				}
				h := http.Header{"Authorization": {"Bearer " + tokens[i]}}
				dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
				c, _, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPHeader: h})
				if err == nil {
					err = c.Write(dctx, websocket.MessageText, hello)
				}
				if err == nil {
					_, _, err = c.Read(dctx) // welcome
				}
				dcancel()
				if err != nil {
					errs.Add(1)
					if c != nil {
						c.CloseNow()
					}
					continue
				}
				open.Add(1)
				conns.Add(1)
				go func() {
					defer conns.Done()
					defer c.CloseNow()
					for {
						if _, _, err := c.Read(ctx); err != nil {
							if ctx.Err() == nil {
								errs.Add(1)
							}
							return
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	logf("idle %s websocket: %d sockets open in %s (%d errors)", r.engine, open.Load(), time.Since(start).Round(time.Millisecond), errs.Load())
	cpu := startCPU(r.cloud.Proc)
	t0 := time.Now()
	select {
	case <-b.ctx.Done():
	case <-time.After(b.cfg.idleDuration):
	}
	row.cloudCPU = cpu.share()
	row.window = time.Since(t0)
	row.sent, row.heartbeats, row.errors = len(tokens), int(open.Load()), int(errs.Load())
	row.cloudPeak = r.cloudPeak()
	if after, err := rig.ReadProc(r.cloud.PID()); err == nil && before > 0 && open.Load() > 0 {
		row.perHost = (after.VmRSS - before) / open.Load()
	}
	cancel()
	conns.Wait()
	logf("idle %s websocket: %d sockets held for %s, %d errors, cloud CPU %.1f%% of a core, %s per socket",
		r.engine, row.heartbeats, row.window.Round(time.Second), row.errors, row.cloudCPU*100, kib(row.perHost))
	return row
}
