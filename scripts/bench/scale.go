package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/scripts/internal/rig"
)

// The scale scenario: the store filled to N deliveries (fill.go), then on
// the real cloud the reads a person runs during an incident, intake, end
// to end latency and a drain, each beside the load average of the
// machine as it was measured.
const (
	scaleHosts      = 1000
	scaleIntakeConc = 256
	scaleE2ERate    = 100
	scaleDrainN     = 20000
)

// scaleRow is one engine's figures at one size.
type scaleRow struct {
	engine string
	n      int
	fill   *fillResult
	// hostsTook: creating and giving sources to scaleHosts hosts over the
	// admin API.
	hostsTook time.Duration
	// dbBytes: the database's size once filled (rig.DBBytes); walBytes
	// the WAL the fill wrote (Postgres; -1 unknown).
	dbBytes, walBytes int64
	reads             []readRow
	readsLoad         float64
	intake            intakeRow
	intakeLoad        float64
	sustained         []intakeRow // -scale-sustain's windows, in order
	e2e               e2eRow
	e2eLoad           float64
	drain             drainRow
	drainLoad         float64
	retention         retentionRow
	prunedEarly       int64     // by retention before its phase, from the cloud's metric (-1 unknown): 0 unless the fill's week aged
	backup            backupRow // SQLite's
	err               string
}

// readRow is one read's times over its calls.
type readRow struct {
	name     string
	p50, p99 time.Duration
	// first is the first call's time (0: it failed): with the cloud just
	// started, its connection and the store's caches cold for that read,
	// the slowest of a few dozen calls is most often this one.
	first   time.Duration
	calls   int
	errs    int
	err     string // the first error
	skipped string // why it was not measured
}

func (b *bench) scale(engine string, n int) scaleRow {
	row := scaleRow{engine: engine, n: n, dbBytes: -1, walBytes: -1}
	r, err := b.newCloud(engine, fmt.Sprintf("scale%d", n))
	if err != nil {
		row.err = (&run{b: b, engine: engine}).fail(err)
		return row
	}
	defer r.close()
	ctx := b.ctx
	kept := b.cfg.scaleStore != "" && n > 0

	var hosts []string
	if !kept {
		t0 := time.Now()
		hosts, err = b.createHosts(ctx, r.cloud.Admin, scaleHosts)
		if err != nil {
			row.err = r.fail(err)
			return row
		}
		row.hostsTook = time.Since(t0)
		logf("scale %s %d: %d hosts with sources in %s", engine, n, len(hosts), row.hostsTook.Round(time.Millisecond))
	}

	// The loader writes with the cloud stopped, as the only writer.
	if err := r.cloud.Close(); err != nil && r.cloud.Running() {
		row.err = r.fail(fmt.Errorf("stop the cloud: %w", err))
		return row
	}
	if kept {
		if err := adoptStore(r, b.cfg.scaleStore); err != nil {
			row.err = r.fail(err)
			return row
		}
	}
	before, _ := rig.ReadDBBytes(ctx, r.dbURL)
	st, err := b.openStore(ctx, r.dbURL)
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	f := &fill{st: st, hosts: hosts, mix: b.mix, ids: b.ids, end: time.Now(), writers: 1024, flushers: 1, takers: 1,
		publicURL: r.cloud.Cfg.PublicURL, logf: logf}
	if engine == "postgres" {
		f.flushers, f.takers = 4, 4
	}
	base := n
	if engine == "postgres" && b.cfg.scaleBase > 0 && n > b.cfg.scaleBase {
		base = b.cfg.scaleBase
	}
	if kept {
		hosts, err = keptHosts(ctx, st)
	} else {
		row.fill, err = f.run(ctx, base)
	}
	if err == nil && base < n {
		t := time.Now()
		row.fill.copied, err = f.copyFill(ctx, r.dbURL, base, n)
		row.fill.copyTook = time.Since(t)
		row.fill.took += row.fill.copyTook
		for s, c := range row.fill.byFate {
			row.fill.byFate[s] = c * (n / base)
		}
	}
	if err == nil && engine == "postgres" && n > 0 {
		// A week's writes in minutes leave what autovacuum would have
		// cleared over the week: dead row versions, pages not yet
		// all-visible, statistics of an emptier table; and pages not yet
		// written out.
		err = settle(ctx, r.dbURL)
	}
	if err == nil && engine == "sqlite" && n > 0 && !kept {
		// The cloud gathers SQLite's statistics as it opens a store (and
		// every hour); the loader's store has those of the empty one,
		// and the alert rules are timed below as the cloud runs them.
		if st, err = b.analyzed(ctx, st, r.dbURL); err != nil {
			row.err = r.fail(err)
			return row
		}
	}
	var samples *scaleSamples
	var alerts []readRow
	if err == nil {
		samples, err = pickSamples(ctx, st, hosts, f.end)
	}
	if err == nil {
		alerts = timeAlertEvaluation(ctx, st, b.cfg.scaleReads)
	}
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	if row.fill != nil && row.fill.admitted > 0 {
		logf("scale %s %d: filled in %s (%.0f/s; %d of them copies, in %s): %v", engine, n, row.fill.took.Round(time.Second),
			float64(row.fill.admitted+row.fill.copied)/row.fill.took.Seconds(), row.fill.copied,
			row.fill.copyTook.Round(time.Second), row.fill.byFate)
	}
	if after, err := rig.ReadDBBytes(ctx, r.dbURL); err == nil {
		row.dbBytes = after.Size
		if before.WAL >= 0 && after.WAL >= before.WAL {
			row.walBytes = after.WAL - before.WAL
		}
	}

	// The cloud on the filled store: on SQLite it gathers the planner's
	// statistics as it opens it, which takes a while at millions.
	r.cloud.Ready.Within = 30 * time.Minute
	// Nothing is pruned until the retention phase (0 keeps them), which
	// sets its own: the fill's week ends when the loader began, so by now
	// its first hour or so is past the default retention (a week), and a
	// first pass pruning it would share the phases before (at 5 million
	// on SQLite, 29,464 deliveries pruned over their first 66 s), as it
	// would a kept store's (-scale-store) aged since.
	r.cloud.Env = append(r.cloud.Env, "RELAY_RETAIN_ACKED=0", "RELAY_RETAIN_DLQ=0")
	t1 := time.Now()
	if err := r.cloud.Start(); err == nil {
		err = r.cloud.WaitReady(ctx, r.cloud.Ready.Within)
	}
	if err != nil {
		row.err = r.fail(fmt.Errorf("restart the cloud: %w", err))
		return row
	}
	logf("scale %s %d: cloud ready on the filled store in %s", engine, n, time.Since(t1).Round(time.Millisecond))

	row.readsLoad = loadAverage()
	row.reads, err = r.measureReads(samples, b.cfg.scaleReads)
	if err != nil {
		row.err = r.fail(err)
		return row
	}
	row.reads = append(row.reads, alerts...)

	r.hostID = samples.host
	row.intakeLoad = loadAverage()
	row.intake = r.measureIntake(intakeRow{engine: engine, conc: scaleIntakeConc}, r.sender(scaleIntakeConc), "scale intake")
	row.sustained = r.sustainIntake(engine, b.cfg.scaleSustain)
	if len(row.sustained) > 0 && engine == "postgres" {
		// Minutes of intake leave a checkpoint under way and thousands
		// of pages dirty: end to end and the drain begin, as they do
		// without the windows, just after a checkpoint has written
		// everything out.
		if err := checkpointAt(ctx, r.dbURL, "the sustained intake"); err != nil {
			row.err = r.fail(err)
			return row
		}
	}

	// The host's default transport, when it is measured.
	transport := b.cfg.transports[0]
	if slices.Contains(b.cfg.transports, "websocket") {
		transport = "websocket"
	}
	if err := r.addHost("scale-e2e"); err != nil {
		row.err = r.fail(err)
		return row
	}
	row.e2eLoad = loadAverage()
	row.e2e = r.measureE2E(e2eRow{engine: engine, mode: "sequential", transport: transport, rate: scaleE2ERate})
	r.stopHost()

	if err := r.addHost("scale-drain"); err != nil {
		row.err = r.fail(err)
		return row
	}
	row.drainLoad = loadAverage()
	row.drain = r.measureDrain(drainRow{engine: engine, transport: transport}, scaleDrainN)
	r.stopHost()

	if engine == "sqlite" && !kept {
		row.backup = r.measureBackup(samples)
	}
	row.prunedEarly = -1
	if v, err := r.cloud.Metric(ctx, `relay_sweep_rows_total{job="retention"}`); err == nil {
		row.prunedEarly = int64(v)
		logf("scale %s %d: pruned by retention before its phase: %d", engine, n, row.prunedEarly)
	}
	if b.cfg.scaleRetention > 0 {
		row.retention = r.measureRetention(transport, b.cfg.scaleRetention)
	}
	return row
}

// stopHost stops the run's host process and its receiver.
func (r *run) stopHost() {
	if r.host != nil {
		_ = r.host.Close()
		r.host = nil
	}
	if r.recv != nil {
		_ = r.recv.Close()
		r.recv = nil
	}
}

// createHosts creates n hosts with the mix's sources, 16 at a time.
func (b *bench) createHosts(ctx context.Context, admin *rig.Admin, n int) ([]string, error) {
	hosts := make([]string, n)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				id, _, err := b.createHost(ctx, admin, fmt.Sprintf("scale-%04d", i))
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				hosts[i] = id
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return hosts, first
}

// settle runs VACUUM (ANALYZE) on the Postgres database at dbURL, then a
// CHECKPOINT, so that the fill's dirty pages are written out before
// anything is measured rather than by a checkpoint still under way during
// the measurements (a fill of copies writes thousands of deliveries a
// second up to the moment it ends).
func settle(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE)"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	logf("scale: VACUUM (ANALYZE) after the fill in %s", time.Since(t0).Round(time.Second))
	return checkpoint(ctx, conn, "the fill")
}

// checkpointAt connects to the Postgres database at dbURL and runs a
// CHECKPOINT there.
func checkpointAt(ctx context.Context, dbURL, after string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer conn.Close(ctx)
	return checkpoint(ctx, conn, after)
}

// checkpoint runs a CHECKPOINT on conn and logs how long it took, after
// what.
func checkpoint(ctx context.Context, conn *pgx.Conn, after string) error {
	t0 := time.Now()
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	logf("scale: CHECKPOINT after %s in %s", after, time.Since(t0).Round(time.Second))
	return nil
}

// analyzed gathers the planner's statistics of st as the cloud does when
// it opens a store (Migrate, with no migration left to apply), and opens
// it again so that every connection plans with them.
func (b *bench) analyzed(ctx context.Context, st store.Store, dbURL string) (store.Store, error) {
	t0 := time.Now()
	err := st.Migrate(ctx)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("gather statistics: %w", err)
	}
	logf("scale: the planner's statistics gathered after the fill in %s", time.Since(t0).Round(time.Millisecond))
	return b.openStore(ctx, dbURL)
}

// openStore opens the database at url as the cloud opens it (its schema
// already migrated by the cloud), with the clouds' SQLite page cache
// (-sqlite-cache-mb).
func (b *bench) openStore(ctx context.Context, dbURL string) (store.Store, error) {
	if path, ok := strings.CutPrefix(dbURL, "sqlite:"); ok {
		return sqlite.OpenWith(ctx, path, sqlite.Options{CacheMB: b.cfg.sqliteCacheMB})
	}
	return postgres.Open(ctx, dbURL)
}

// scaleSamples are what the reads look up: a host, and deliveries of a
// week's store (received half a week ago, dead-lettered), empty on an
// empty store.
type scaleSamples struct {
	host  string
	older *store.Delivery // received about half a week ago
	dlq   *store.Delivery
	since time.Time // a day before the newest webhook
}

// pickSamples chooses what the reads look up in a filled store.
func pickSamples(ctx context.Context, st store.Store, hosts []string, end time.Time) (*scaleSamples, error) {
	s := &scaleSamples{host: hosts[len(hosts)/2], since: end.Add(-24 * time.Hour)}
	mid := end.Add(-fillSpan / 2)
	ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{HostID: s.host, Limit: 1, BeforeReceivedAt: &mid, BeforeID: "~"})
	if err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	if len(ds) > 0 {
		s.older = ds[0]
	}
	if ds, err = st.DeliveryFind(ctx, &store.DeliveryFindParams{Status: store.StatusDLQ, Limit: 1}); err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	if len(ds) > 0 {
		s.dlq = ds[0]
	}
	return s, nil
}

// timeAlertEvaluation times calls evaluations of the alert rules on st
// (in process, as the cloud's evaluator runs them: a fake clock moves a
// second interval on before each), and the first apart: after the fill it
// records every host's presence and fires their alerts (at most
// alert.MaxHosts of each), writes an evaluation does once per change, not
// per call.
func timeAlertEvaluation(ctx context.Context, st store.Store, calls int) []readRow {
	first := readRow{name: "alerts: the first evaluation after the fill (records each host's presence, fires its alerts)"}
	row := readRow{name: "alerts: one evaluation of the rules (in process)"}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ring, err := secrets.NewRing(key)
	if err != nil {
		row.err = err.Error()
		return []readRow{row}
	}
	clock := clockwork.NewFakeClockAt(time.Now())
	e := alert.New(st, ring, alert.Config{Interval: time.Second}, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var lat []time.Duration
	for i := range calls + 1 {
		clock.Advance(time.Second)
		t0 := time.Now()
		e.Tick(ctx)
		d := time.Since(t0)
		if i == 0 {
			first.p50, first.p99, first.calls = d, d, 1
			continue
		}
		lat = append(lat, d)
	}
	p := newPercentiles(lat)
	row.p50, row.p99, row.calls = p.at(0.5), p.at(0.99), len(lat)
	return []readRow{first, row}
}

// measureReads times each read of an incident, calls times over HTTP.
func (r *run) measureReads(s *scaleSamples, calls int) ([]readRow, error) {
	ctx := r.b.ctx
	base := r.cloud.URL
	console, err := consoleClient(ctx, base, r.cloud.Cfg.AdminToken)
	if err != nil {
		return nil, err
	}
	api := r.cloud.Admin.Client
	apiGet := func(path string) func() error {
		return func() error { return get(ctx, api, base+path, "Bearer "+r.cloud.Cfg.AdminToken) }
	}
	pageGet := func(path string) func() error {
		return func() error { return get(ctx, console, base+path, "") }
	}
	ctl := func(ref string, absent bool) func() error {
		return func() error { return r.ctlInspect(ctx, ref, absent) }
	}
	h := url.PathEscape(s.host)
	since := url.QueryEscape(s.since.UTC().Format(time.RFC3339))
	const absentEvent, absentCorrelation = "3f1c2a9e-0000-4000-8000-000000000000", "0123456789abcdef"
	type read struct {
		name    string
		do      func() error
		skipped string
	}
	reads := []read{
		{name: "API: host list with counts, a page of 100 (`GET /api/hosts`)", do: apiGet("/api/hosts")},
		{name: "API: … 500 a page (`?limit=500`)", do: apiGet("/api/hosts?limit=500")},
		{name: "API: … online (`?presence=online`: every host read to fill the page)", do: apiGet("/api/hosts?presence=online")},
		{name: "API: host page with counts (`GET /api/hosts/:id`)", do: apiGet("/api/hosts/" + h)},
		{name: "API: a host's deliveries, newest (`/api/hosts/:id/webhooks`)", do: apiGet("/api/hosts/" + h + "/webhooks")},
		{name: "API: … dead-lettered (`?status=dlq`)", do: apiGet("/api/hosts/" + h + "/webhooks?status=dlq")},
		{name: "API: … acked (`?status=acked`)", do: apiGet("/api/hosts/" + h + "/webhooks?status=acked")},
		{name: "API: … retrying (`?status=retrying`)", do: apiGet("/api/hosts/" + h + "/webhooks?status=retrying")},
		{name: "API: … of a source (`?source=stripe`)", do: apiGet("/api/hosts/" + h + "/webhooks?source=stripe")},
		{name: "API: a host's deliveries of the last day (`/api/deliveries?host=…&since=…`)", do: apiGet("/api/deliveries?host=" + h + "&since=" + since)},
		{name: "API: every host's, of the last day (`/api/deliveries?since=…`)", do: apiGet("/api/deliveries?since=" + since)},
		{name: "API: the dead letters, every host (`/api/deliveries?status=dlq`)", do: apiGet("/api/deliveries?status=dlq")},
		{name: "API: every host's from one source (`/api/deliveries?source=stripe`)", do: apiGet("/api/deliveries?source=stripe")},
		{name: "API: absent event id (`/api/deliveries?event_id=…`)", do: apiGet("/api/deliveries?event_id=" + absentEvent)},
		{name: "API: absent correlation id (`?correlation_id=…`)", do: apiGet("/api/deliveries?correlation_id=" + absentCorrelation)},
		{name: "API: a host's rejections (`/api/hosts/:id/rejections`)", do: apiGet("/api/hosts/" + h + "/rejections")},
		{name: "API: alerts (`GET /api/alerts`)", do: apiGet("/api/alerts")},
		{name: "API: every delivery's audit trail, newest (`/api/events?last=100`, as `cloud ctl tail` starts)", do: apiGet("/api/events?last=100")},
		{name: "API: … from the oldest kept (`/api/events?after=1&limit=500`)", do: apiGet("/api/events?after=1&limit=500")},
		{name: "console: hosts page (100 a page)", do: pageGet("/console/")},
		{name: "console: host page", do: pageGet("/console/hosts/" + h)},
		{name: "console: deliveries, newest", do: pageGet("/console/deliveries")},
		{name: "console: dead letters", do: pageGet("/console/deliveries?status=dlq")},
		{name: "console: volume chart", do: pageGet("/console/volume")},
		{name: "console: rejections", do: pageGet("/console/rejections")},
		{name: "console: alerts", do: pageGet("/console/alerts")},
		{name: "`cloud ctl inspect` an absent event id", do: ctl(absentEvent, true)},
		{name: "`cloud ctl inspect` an absent correlation id", do: ctl(absentCorrelation, true)},
	}
	present := []struct {
		name string
		d    *store.Delivery
		do   func(d *store.Delivery) func() error
	}{
		{"API: a delivery by id, half a week old (`/api/hosts/:id/webhooks/:delivery`)", s.older, func(d *store.Delivery) func() error {
			return apiGet("/api/hosts/" + url.PathEscape(d.HostID) + "/webhooks/" + url.PathEscape(d.ID))
		}},
		{"API: its event id (`/api/deliveries?event_id=…`)", s.older, func(d *store.Delivery) func() error {
			return apiGet("/api/deliveries?event_id=" + url.QueryEscape(d.EventID))
		}},
		{"API: its correlation id (`?correlation_id=…`)", s.older, func(d *store.Delivery) func() error {
			return apiGet("/api/deliveries?correlation_id=" + url.QueryEscape(d.CorrelationID))
		}},
		{"console: a delivery's page", s.dlq, func(d *store.Delivery) func() error {
			return pageGet("/console/hosts/" + url.PathEscape(d.HostID) + "/deliveries/" + url.PathEscape(d.ID))
		}},
		{"`cloud ctl inspect` a delivery id", s.older, func(d *store.Delivery) func() error { return ctl(d.ID, false) }},
		{"`cloud ctl inspect` an event id", s.older, func(d *store.Delivery) func() error { return ctl(d.EventID, false) }},
		{"`cloud ctl inspect` a correlation id", s.older, func(d *store.Delivery) func() error { return ctl(d.CorrelationID, false) }},
	}
	for _, p := range present {
		if p.d == nil {
			reads = append(reads, read{name: p.name, skipped: "no delivery stored"})
			continue
		}
		reads = append(reads, read{name: p.name, do: p.do(p.d)})
	}
	var rows []readRow
	for _, rd := range reads {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		row := readRow{name: rd.name, skipped: rd.skipped}
		if rd.do != nil {
			row = timeRead(rd.name, calls, rd.do)
		}
		logf("scale %s: %s: p50 %s p99 %s first %s (%d calls, %d errors%s)", r.engine, row.name, ms(row.p50), ms(row.p99), ms(row.first), row.calls, row.errs,
			strings.TrimSuffix(", "+row.err, ", "))
		rows = append(rows, row)
	}
	return rows, nil
}

// timeRead calls do calls times, one after the other, and times each.
func timeRead(name string, calls int, do func() error) readRow {
	row := readRow{name: name}
	var lat []time.Duration
	for i := range calls {
		t0 := time.Now()
		err := do()
		d := time.Since(t0)
		if err != nil {
			row.errs++
			if row.err == "" {
				row.err = err.Error()
			}
			continue
		}
		if i == 0 {
			row.first = d
		}
		lat = append(lat, d)
	}
	p := newPercentiles(lat)
	row.p50, row.p99, row.calls = p.at(0.5), p.at(0.99), calls
	return row
}

// get fetches u and reads the whole answer; an answer other than 200 is
// an error.
func get(ctx context.Context, c *http.Client, u, auth string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, oneLine(string(body)))
	}
	return nil
}

// consoleClient logs in to the console with the admin token, as a person
// does, and keeps the session's cookie.
func consoleClient(ctx context.Context, base, token string) (*http.Client, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Jar: jar, Timeout: 5 * time.Minute, Transport: newTransport(4),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := url.Values{"token": {token}, "next": {"/console/"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/console/login", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console login: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("console login: %s", resp.Status)
	}
	return c, nil
}

// ctlInspect runs `cloud ctl inspect ref` against the run's cloud, as a
// person does (the process's start included); for an absent ref, the
// command must say it found nothing.
func (r *run) ctlInspect(ctx context.Context, ref string, absent bool) error {
	cmd := exec.CommandContext(ctx, r.b.bins.Cloud, "ctl", "inspect", ref)
	cmd.Env = append(os.Environ(), "RELAY_URL="+r.cloud.URL, "RELAY_ADMIN_TOKEN="+r.cloud.Cfg.AdminToken)
	out, err := cmd.CombinedOutput()
	if absent {
		if err == nil || !strings.Contains(strings.ToLower(string(out)), "no ") {
			return fmt.Errorf("ctl inspect %s: want nothing found, got %v: %s", ref, err, oneLine(string(out)))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("ctl inspect %s: %w: %s", ref, err, oneLine(string(out)))
	}
	return nil
}

// loadAverage is the machine's load average over the last minute (-1 if
// unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// scaleWindow is the length of one window of -scale-sustain.
const scaleWindow = 30 * time.Second

// sustainIntake runs intake at scaleIntakeConc for d more after the
// measured run, as consecutive windows of scaleWindow (or d, if shorter),
// each measured as an intake run of its own. The measured run is ten
// seconds long and on Postgres begins in the checkpoint cycle the fill's
// CHECKPOINT started, where nearly every index page a webhook changes is
// changed for the first time since the checkpoint (and written whole into
// the WAL); the windows show whether the rate comes back as the cycle goes
// on.
func (r *run) sustainIntake(engine string, d time.Duration) []intakeRow {
	if d <= 0 {
		return nil
	}
	w := min(scaleWindow, d)
	s := r.sender(scaleIntakeConc)
	var rows []intakeRow
	for at := time.Duration(0); at < d && r.b.ctx.Err() == nil; at += w {
		rows = append(rows, r.measureIntakeFor(intakeRow{engine: engine, conc: scaleIntakeConc}, s, 0, w,
			fmt.Sprintf("scale sustained intake %s–%s", at, at+w)))
	}
	return rows
}

// adoptStore puts the store kept in dir (-scale-store: its cloud.db and,
// in dir/cloud, the keys of the cloud that wrote it, as -keep leaves a
// run's directory) in the place of r's, whose cloud is stopped. The
// database is linked, not copied: the phases change it.
func adoptStore(r *run, dir string) error {
	db := filepath.Join(r.dir, "cloud.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("-scale-store: %w", err)
		}
	}
	if err := os.Link(filepath.Join(dir, "cloud.db"), db); err != nil {
		return fmt.Errorf("-scale-store: %w", err)
	}
	// A WAL the last cloud left holds commits the file does not yet.
	if err := os.Link(filepath.Join(dir, "cloud.db-wal"), db+"-wal"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("-scale-store: %w", err)
	}
	for _, key := range []string{"secret.key", "jwt.key"} {
		k, err := os.ReadFile(filepath.Join(dir, "cloud", key))
		if err == nil {
			err = os.WriteFile(filepath.Join(r.dir, "cloud", key), k, 0o600)
		}
		if err != nil {
			return fmt.Errorf("-scale-store: %w", err)
		}
	}
	return nil
}

// keptHosts are the hosts a fill created in a kept store: its first
// scaleHosts, oldest first.
func keptHosts(ctx context.Context, st store.Store) ([]string, error) {
	hs, err := st.HostList(ctx)
	if err != nil {
		return nil, fmt.Errorf("-scale-store: %w", err)
	}
	if len(hs) < scaleHosts {
		return nil, fmt.Errorf("-scale-store: %d hosts, not a filled store's %d", len(hs), scaleHosts)
	}
	ids := make([]string, scaleHosts)
	for i := range ids {
		ids[i] = hs[i].ID
	}
	return ids, nil
}
