package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// The group scenarios: a group of hosts (README, "Teams of hosts: groups")
// measured beside one host of the same run.
const (
	groupIntakeMembers   = 5 // group-intake: a fanout group's members
	groupDrainMembers    = 3 // group-drain: an any group's members
	groupFailoverMembers = 3 // group-failover: an any group's members
)

// member is a host of a run's group: created, claimed on its first start,
// forwarding to a receiver of its own.
type member struct {
	id, code string
	host     *rig.Host
	recv     *rig.Receiver
}

// newGroup creates n hosts (not started) and a group of them, in order,
// with a source of mode for each provider of the mix, as newRun's host
// has.
func (r *run) newGroup(mode string, n int) error {
	ctx := r.b.ctx
	ids := make([]string, n)
	for i := range n {
		h, err := r.cloud.CreateHost(ctx, fmt.Sprintf("member-%d", i))
		if err != nil {
			return err
		}
		r.members = append(r.members, &member{id: h.ID, code: h.ClaimCode})
		ids[i] = h.ID
	}
	g, err := r.cloud.NewGroup(ctx, "bench-"+mode, ids...)
	if err != nil {
		return err
	}
	err = r.cloud.PutGroupSource(ctx, g, "github", map[string]any{"mode": mode, "provider": "github", "secrets": []string{secret},
		"options": map[string]string{"replay_guard": "off"}})
	if err == nil && slices.Contains(r.b.mix.providers(), "stripe") {
		err = r.cloud.PutGroupSource(ctx, g, "stripe", map[string]any{"mode": mode, "provider": "stripe", "secrets": []string{stripeSecret}})
	}
	if err != nil {
		return err
	}
	r.groupID = g
	return nil
}

// groupSender is a sender to the run's group.
func (r *run) groupSender(conns int) *sender {
	s := newSender(r.cloud.URL, r.groupID, conns, r.b.mix, r.b.ids, r.b.cfg.dup)
	r.senders = append(r.senders, s)
	return s
}

// startMembers claims every member (on its first start) and runs it with
// the host configuration cfg makes of its receiver's URL, all at once;
// answer, if not nil, makes a member's receiver's answers (see
// rig.ReceiverOptions.Answer).
func (r *run) startMembers(cfg func(url string) map[string]any, answer func(i int) func(*http.Request, string, int) int) error {
	for i, m := range r.members {
		if m.recv != nil {
			continue
		}
		opts := rig.ReceiverOptions{}
		if answer != nil {
			opts.Answer = answer(i)
		}
		rc, err := rig.StartReceiver(opts)
		if err != nil {
			return err
		}
		m.recv = rc
	}
	errs := make([]error, len(r.members))
	var wg sync.WaitGroup
	for i, m := range r.members {
		wg.Go(func() {
			m.host, errs[i] = rig.StartHost(r.b.ctx, rig.HostConfig{Bin: r.b.bins.Host, CloudURL: r.cloud.URL, ClaimCode: m.code,
				StateDir: filepath.Join(r.dir, fmt.Sprintf("member-%d", i)), Config: cfg(m.recv.URL)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		r.members[i].code = ""
	}
	return nil
}

// closeMembers stops the members and their receivers.
func (r *run) closeMembers() {
	var wg sync.WaitGroup
	for _, m := range r.members {
		if m.host != nil {
			wg.Go(func() { _ = m.host.Close() })
		}
	}
	wg.Wait()
	for _, m := range r.members {
		if m.recv != nil {
			_ = m.recv.Close()
		}
	}
}

// memberCounts is each member's deliveries by status, as the cloud counts
// them (a group's deliveries are its members' own).
func (r *run) memberCounts() ([]map[string]int, error) {
	out := make([]map[string]int, len(r.members))
	for i, m := range r.members {
		c, err := r.cloud.Counts(r.b.ctx, m.id)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// sumStatus adds one status over members' counts.
func sumStatus(counts []map[string]int, status string) int {
	n := 0
	for _, c := range counts {
		n += c[status]
	}
	return n
}

// ---- group-intake ----

// groupIntake is the intake run to a fanout group of groupIntakeMembers
// hosts (not running, as the intake's host is not): each webhook stores
// a delivery for every member, its body once.
func (b *bench) groupIntake(engine string, conc int) intakeRow {
	row := intakeRow{engine: engine, conc: conc, members: groupIntakeMembers}
	r, err := b.newCloud(engine, fmt.Sprintf("group_intake%d", conc))
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	if err := r.newGroup("fanout", groupIntakeMembers); err != nil {
		row.err = r.fail(err)
		return row
	}
	row = r.measureIntake(row, r.groupSender(conc), "group-intake")
	if row.err != "" {
		return row
	}
	// Every member has a delivery of every webhook stored.
	counts, err := r.memberCounts()
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	for i, c := range counts {
		if c["queued"] != counts[0]["queued"] || c["queued"] == 0 {
			row.err = r.fail(fmt.Errorf("members' queued deliveries differ: member %d has %d, member 0 %d", i, c["queued"], counts[0]["queued"]))
			return row
		}
	}
	return row
}

// groupRatio is a group's figure over one host's (-1 when either is
// unknown): how much more the group costs.
func groupRatio(group, single float64) float64 {
	if group < 0 || single <= 0 {
		return -1
	}
	return group / single
}

// singleIntake is the intake row of the same engine and concurrency as a
// group's, if the run measured one.
func singleIntake(rows []intakeRow, engine string, conc int) (intakeRow, bool) {
	for _, r := range rows {
		if r.engine == engine && r.conc == conc && r.err == "" {
			return r, true
		}
	}
	return intakeRow{}, false
}

// ---- group-drain ----

// groupDrainRow is a drain to an any group.
type groupDrainRow struct {
	engine, transport string
	members           int
	queued            int
	held              []int // by member, when queued (none running)
	toForward, toAck  time.Duration
	rate              float64
	acked             []int // by member, as the cloud counts them
	runs              []int // by member, at its receiver
	duplicates        int   // runs beyond one of a delivery, across members
	err               string
}

// groupDrain queues cfg.drainN deliveries to an any group of
// groupDrainMembers hosts that are not running, then starts them all at
// once, as the drain does its host, and counts until every delivery is
// acked.
func (b *bench) groupDrain(engine, transport string) groupDrainRow {
	row := groupDrainRow{engine: engine, transport: transport, members: groupDrainMembers}
	r, err := b.newCloud(engine, "group_drain_"+transport)
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	if err := r.newGroup("any", groupDrainMembers); err != nil {
		row.err = r.fail(err)
		return row
	}
	s := r.groupSender(b.cfg.drainConc)
	logf("group-drain %s: queuing %d deliveries", engine, b.cfg.drainN)
	res := s.closedLoop(b.ctx, b.cfg.drainConc, 24*time.Hour, int64(b.cfg.drainN))
	row.queued = res.OK - res.Dups
	counts, err := r.memberCounts()
	if err == nil && sumStatus(counts, "queued") != row.queued {
		err = fmt.Errorf("members' queued deliveries %v after %d stored", counts, row.queued)
	}
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	row.held = statusOf(counts, "queued")
	logf("group-drain %s: queued %d at %.0f/s (%d errors); held by the members: %v", engine, row.queued, res.Rate, res.BadStatus+res.Transport, row.held)
	// Claim first, so the clock starts with the hosts' processes.
	for i, m := range r.members {
		if err := rig.ClaimHost(b.ctx, b.bins.Host, r.cloud.URL, m.code, filepath.Join(r.dir, fmt.Sprintf("member-%d", i))); err != nil {
			row.err = r.fail(err)
			return row
		}
		m.code = ""
	}
	start := time.Now()
	if err := r.startMembers(func(url string) map[string]any {
		return withTransport(b.hostConfig(url, true, b.cfg.drainWorkers), transport)
	}, nil); err != nil {
		row.err = r.fail(err)
		return row
	}
	timeout := 10*time.Minute + time.Duration(row.queued)*10*time.Millisecond
	err = rig.WaitFor(b.ctx, timeout, 5*time.Millisecond, "every delivery forwarded", func() (bool, error) {
		return len(r.memberKeys()) >= row.queued, nil
	})
	if err != nil {
		row.err = r.fail(fmt.Errorf("%w (%d of %d forwarded)", err, len(r.memberKeys()), row.queued))
		return row
	}
	row.toForward = time.Since(start)
	err = rig.WaitFor(b.ctx, 2*time.Minute, 50*time.Millisecond, "every delivery acked", func() (bool, error) {
		c, err := r.memberCounts()
		counts = c
		return sumStatus(c, "acked") >= row.queued, err
	})
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	row.toAck = time.Since(start)
	row.rate = float64(row.queued) / row.toAck.Seconds()
	row.acked = statusOf(counts, "acked")
	for _, m := range r.members {
		row.runs = append(row.runs, m.recv.Total())
	}
	row.duplicates = sum(row.runs) - len(r.memberKeys())
	logf("group-drain %s %s: %d in %s (last forward at %s): %.0f/s; acked by member %s, run by member %v, %d duplicates",
		engine, transport, row.queued, row.toAck.Round(time.Millisecond), row.toForward.Round(time.Millisecond), row.rate,
		sharesText(row.acked), row.runs, row.duplicates)
	return row
}

// memberKeys is the delivery ids some member's receiver got.
func (r *run) memberKeys() map[string]bool {
	keys := map[string]bool{}
	for _, m := range r.members {
		if m.recv == nil {
			continue
		}
		for k := range m.recv.Snapshot() {
			keys[k] = true
		}
	}
	return keys
}

func statusOf(counts []map[string]int, status string) []int {
	out := make([]int, len(counts))
	for i, c := range counts {
		out[i] = c[status]
	}
	return out
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// shares is each count's share of their sum, in percent (zeros when the
// sum is 0).
func shares(counts []int) []float64 {
	out := make([]float64, len(counts))
	t := sum(counts)
	if t == 0 {
		return out
	}
	for i, n := range counts {
		out[i] = float64(n) * 100 / float64(t)
	}
	return out
}

// sharesText is the shares as the report shows them: "34 / 33 / 33 %".
func sharesText(counts []int) string {
	if len(counts) == 0 {
		return "–"
	}
	parts := make([]string, len(counts))
	for i, s := range shares(counts) {
		parts[i] = fmt.Sprintf("%.0f", s)
	}
	return strings.Join(parts, " / ") + " %"
}

// singleDrain is the drain row of the same engine and transport as a
// group's, if the run measured one.
func singleDrain(rows []drainRow, engine, transport string) (drainRow, bool) {
	for _, r := range rows {
		if r.engine == engine && r.transport == transport && r.err == "" {
			return r, true
		}
	}
	return drainRow{}, false
}

// ---- group-failover ----

// groupFailoverRow is an any group's member SIGKILLed while it holds work.
type groupFailoverRow struct {
	engine, transport string
	sent              int
	held              int           // the killed member's deliveries not done when it died
	leased, waiting   int           // of held: leased to it (delivering), waiting on it (queued, retrying)
	handed            int           // of held: run by another member within the wait
	p50, max          time.Duration // from the SIGKILL to another member's handler, of held
	maxLeased         time.Duration // the same, of the leased ones
	maxWaiting        time.Duration // the same, of the waiting ones
	// The webhooks sent after the SIGKILL (some given to the killed
	// member while the cloud still counted it online): how many, and the
	// most one took from its POST to a handler.
	after    int
	afterMax time.Duration
	bound    string // the settings that bound it
	err      string
}

// secsOf is a hand-over time of n deliveries, "–" when there were none: in
// ms below a second (a socket's), else in seconds.
func secsOf(n int, d time.Duration) string {
	switch {
	case n == 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return secs(d)
}

// failoverSettings are the cloud's settings of a failover run (empty: the
// cloud's default) and what the report says bounds the hand-over.
func (c *config) failoverSettings() (env []string, lease, late time.Duration) {
	lease, late = 2*time.Minute, time.Minute // cloud/options.go's defaults
	if c.groupLease > 0 {
		lease = c.groupLease
		env = append(env, "RELAY_LEASE="+c.groupLease.String())
	}
	if c.groupLateAfter > 0 {
		late = c.groupLateAfter
		env = append(env, "RELAY_HOST_LATE_AFTER="+c.groupLateAfter.String())
	}
	return env, lease, late
}

// failoverBound says what bounds a hand-over on a transport.
func failoverBound(transport string, lease, late time.Duration) string {
	if transport == "websocket" {
		return fmt.Sprintf("the socket's close, seen at once (RELAY_LEASE=%s, RELAY_HOST_LATE_AFTER=%s not waited for)", lease, late)
	}
	return fmt.Sprintf("RELAY_LEASE=%s for what it had leased, RELAY_HOST_LATE_AFTER=%s for what waited on it (then the hand-over sweep, every 2 s)", lease, late)
}

// groupFailover runs traffic at cfg.groupRate to an any group of
// groupFailoverMembers running hosts on transport; a third of the way in,
// the first member's app stops answering (a handler at work), and once it
// holds work the member is SIGKILLed: the time from the kill until each
// delivery it held reaches another member's handler.
func (b *bench) groupFailover(engine, transport string) groupFailoverRow {
	row := groupFailoverRow{engine: engine, transport: transport}
	env, lease, late := b.cfg.failoverSettings()
	row.bound = failoverBound(transport, lease, late)
	r, err := b.newCloud(engine, "group_failover_"+transport, env...)
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	if err := r.newGroup("any", groupFailoverMembers); err != nil {
		row.err = r.fail(err)
		return row
	}
	var hanging atomic.Bool
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	answer := func(i int) func(*http.Request, string, int) int {
		if i != 0 {
			return nil
		}
		return func(*http.Request, string, int) int {
			if hanging.Load() {
				<-release
			}
			return 200
		}
	}
	if err := r.startMembers(func(url string) map[string]any {
		return withTransport(b.hostConfig(url, false, 0), transport)
	}, answer); err != nil {
		row.err = r.fail(err)
		return row
	}
	victim, others := r.members[0], r.members[1:]

	s := r.groupSender(64)
	ctx, cancel := context.WithCancel(b.ctx)
	var traffic loadResult
	var wg sync.WaitGroup
	var sentMu sync.Mutex
	sentAt := map[string]time.Time{} // event id → when it was sent
	wg.Go(func() {
		traffic = s.openLoop(ctx, b.cfg.groupRate, b.cfg.groupFailoverDur, 64, func(id string, _ int, at time.Time) {
			sentMu.Lock()
			sentAt[id] = at
			sentMu.Unlock()
		}, nil)
	})
	defer func() { cancel(); wg.Wait() }()

	select {
	case <-b.ctx.Done():
		return row
	case <-time.After(b.cfg.groupFailoverDur / 3):
	}
	before := victim.recv.Total()
	hanging.Store(true)
	err = rig.WaitFor(b.ctx, 30*time.Second, 10*time.Millisecond, "the first member holding work", func() (bool, error) {
		return victim.recv.Total() > before, nil
	})
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	// What it ran before its app hung is reported by now.
	time.Sleep(time.Second)
	ds, err := r.cloud.Deliveries(b.ctx, victim.id, "")
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	victim.host.Kill()
	killAt := time.Now()
	releaseOnce.Do(func() { close(release) })
	leased := map[string]bool{}
	var held []string
	for _, d := range ds {
		switch d.Status {
		case "acked", "dlq":
			continue
		case "delivering", "delivered":
			leased[d.DeliveryID] = true
		}
		held = append(held, d.DeliveryID)
	}
	// A report that reached the cloud between the listing and the kill
	// acked one of them: not held.
	if acked, err := r.cloud.Deliveries(b.ctx, victim.id, "acked"); err == nil {
		done := map[string]bool{}
		for _, d := range acked {
			done[d.DeliveryID] = true
		}
		held = slices.DeleteFunc(held, func(id string) bool { return done[id] })
	}
	row.held = len(held)
	for _, id := range held {
		if leased[id] {
			row.leased++
		}
	}
	row.waiting = row.held - row.leased
	logf("group-failover %s %s: member %s killed holding %d deliveries (%d leased, %d waiting)", engine, transport, victim.id, row.held, row.leased, row.waiting)
	firstAt := func(id string) (time.Time, bool) {
		var at time.Time
		for _, m := range others {
			if h, ok := m.recv.Get(id); ok && (at.IsZero() || h.First.Before(at)) {
				at = h.First
			}
		}
		return at, !at.IsZero()
	}
	waitErr := rig.WaitFor(b.ctx, lease+late+time.Minute, 20*time.Millisecond, "every held delivery at another member", func() (bool, error) {
		for _, id := range held {
			if _, ok := firstAt(id); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	var all []time.Duration
	for _, id := range held {
		at, ok := firstAt(id)
		if !ok {
			continue
		}
		d := max(0, at.Sub(killAt))
		all = append(all, d)
		if leased[id] {
			row.maxLeased = max(row.maxLeased, d)
		} else {
			row.maxWaiting = max(row.maxWaiting, d)
		}
	}
	row.handed = len(all)
	p := newPercentiles(all)
	row.p50, row.max = p.at(0.5), p.max()
	// The traffic runs its course; then every webhook sent after
	// the kill reaches a member.
	wg.Wait()
	row.sent = traffic.OK - traffic.Dups
	arrived := func() map[string]time.Time {
		out := map[string]time.Time{}
		for _, m := range others {
			for key, h := range m.recv.Snapshot() {
				// An any group's delivery id is a host's: {source}:{event_id}:{ms}.
				id := eventIDOf(key)
				if at, ok := out[id]; !ok || h.First.Before(at) {
					out[id] = h.First
				}
			}
		}
		return out
	}
	sentMu.Lock()
	var afterIDs []string
	for id, at := range sentAt {
		if at.After(killAt) {
			afterIDs = append(afterIDs, id)
		}
	}
	sentMu.Unlock()
	afterErr := rig.WaitFor(b.ctx, lease+late+time.Minute, 50*time.Millisecond, "every webhook sent after the kill at a member", func() (bool, error) {
		got := arrived()
		for _, id := range afterIDs {
			if _, ok := got[id]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	got := arrived()
	for _, id := range afterIDs {
		if at, ok := got[id]; ok {
			row.after++
			row.afterMax = max(row.afterMax, at.Sub(sentAt[id]))
		}
	}
	logf("group-failover %s %s: %d of %d held run by another member, p50 %s max %s (leased: max %s; waiting: max %s); %d of %d webhooks sent after the kill run, the slowest in %s; bound by %s",
		engine, transport, row.handed, row.held, secsOf(row.handed, row.p50), secsOf(row.handed, row.max), secsOf(row.leased, row.maxLeased), secsOf(row.waiting, row.maxWaiting),
		row.after, len(afterIDs), secsOf(row.after, row.afterMax), row.bound)
	if waitErr == nil && afterErr != nil {
		waitErr = fmt.Errorf("%w (%d of %d)", afterErr, row.after, len(afterIDs))
	}
	switch {
	case waitErr != nil:
		row.err = r.fail(fmt.Errorf("%w (%d of %d)", waitErr, row.handed, row.held))
	case row.held == 0:
		row.err = r.fail(fmt.Errorf("the killed member held nothing"))
	}
	return row
}
