package main

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// The scale scenario's last phase: retention while intake runs. The cloud
// starts again keeping acked and dead-lettered deliveries retentionKeep,
// so that the filled store's whole week is due at its first pass (a
// backlog pruned as fast as the store can) and what the phase sends is
// pruned retentionKeep after its ack, as much each minute as intake
// brings: whether the store's size then stops growing is what the phase
// shows. A host acks what is sent, at scaleE2ERate, for the phase's
// length; the cloud's relay_sweep_* metrics say what retention pruned and
// how long its passes took, sampled every second.
const retentionKeep = 2 * time.Minute

// retentionRow is the phase's figures.
type retentionRow struct {
	took time.Duration
	rate float64
	sent int
	errs int
	load float64
	// pruned: deliveries retention deleted over the phase; passSeconds
	// the time its passes took. backlog*: its first pass, the week.
	pruned, backlog             float64
	passSeconds, backlogSeconds float64
	passes                      int
	// backlogRunning: the first pass had not ended when the phase did
	// (backlog is what it had pruned, backlogSeconds how long it had run).
	backlogRunning bool
	// steadyPruned: what passes after the backlog pruned, over
	// steadyTook, against steadySent sent in that time.
	steadyPruned float64
	steadyTook   time.Duration
	steadySent   int
	// The intake's POST → answer while a pass ran and while none did.
	duringP50, duringP99   time.Duration
	outsideP50, outsideP99 time.Duration
	during, outside        int
	// The database's size: as the phase began, its least, and at its
	// end; grown: what it grew over the phase's second half.
	sizeStart, sizeMin, sizeEnd int64
	grown                       int64
	err                         string
}

// retentionSample is one reading of the cloud's retention metrics.
type retentionSample struct {
	at            time.Time
	rows, seconds float64
	size          int64 // -1 when not read
}

func (r *run) measureRetention(transport string, d time.Duration) retentionRow {
	b := r.b
	row := retentionRow{rate: scaleE2ERate, sizeStart: -1, sizeMin: -1, sizeEnd: -1}
	if err := r.addHost("scale-retention"); err != nil {
		row.err = r.fail(err)
		return row
	}
	if err := r.cloud.Close(); err != nil && r.cloud.Running() {
		row.err = r.fail(fmt.Errorf("stop the cloud: %w", err))
		return row
	}
	keep := retentionKeep.String()
	r.cloud.Env = append(r.cloud.Env, "RELAY_RETAIN_ACKED="+keep, "RELAY_RETAIN_DLQ="+keep)
	began := time.Now()
	if err := r.cloud.Start(); err == nil {
		err = r.cloud.WaitReady(b.ctx, r.cloud.Ready.Within)
	} else {
		row.err = r.fail(fmt.Errorf("restart the cloud: %w", err))
		return row
	}
	if err := r.startHost(false, 0, transport); err != nil {
		row.err = r.fail(err)
		return row
	}
	defer r.stopHost()
	row.load = loadAverage()

	// The sampler: the metrics every second, the size every fifth.
	var (
		mu      sync.Mutex
		samples []retentionSample
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for i := 0; ; i++ {
			s := retentionSample{at: time.Now(), size: -1}
			var err error
			s.rows, err = r.cloud.Metric(b.ctx, `relay_sweep_rows_total{job="retention"}`)
			if err == nil {
				s.seconds, err = r.cloud.Metric(b.ctx, `relay_sweep_seconds_total{job="retention"}`)
			}
			if i%5 == 0 {
				if db, err := rig.ReadDBBytes(b.ctx, r.dbURL); err == nil {
					s.size = db.Size
				}
			}
			if err == nil {
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	s := r.sender(64)
	type sent struct{ at, answered time.Time }
	var sentMu sync.Mutex
	posts := map[string]*sent{}
	res := s.openLoop(b.ctx, row.rate, d, 64, func(id string, _ int, at time.Time) {
		sentMu.Lock()
		posts[id] = &sent{at: at}
		sentMu.Unlock()
	}, func(id string, at time.Time) {
		sentMu.Lock()
		if p := posts[id]; p != nil {
			p.answered = at
		}
		sentMu.Unlock()
	})
	// One more sample after the last webhook was answered.
	time.Sleep(1100 * time.Millisecond)
	close(stop)
	<-sampled
	row.took = time.Since(began)
	row.sent, row.errs = res.OK-res.Dups, res.BadStatus+res.Transport

	mu.Lock()
	defer mu.Unlock()
	if len(samples) < 2 {
		row.err = r.fail(fmt.Errorf("retention: %d samples of the cloud's metrics", len(samples)))
		return row
	}
	passes, backlogAt, running := retentionPasses(began, samples)
	last := samples[len(samples)-1]
	row.passes, row.pruned, row.passSeconds = len(passes), last.rows, last.seconds
	backlogEnd := samples[0].at
	switch {
	case backlogAt >= 0:
		row.backlog, row.backlogSeconds, backlogEnd = samples[backlogAt].rows, samples[backlogAt].seconds, samples[backlogAt].at
	case running != nil:
		row.backlog, row.backlogSeconds, backlogEnd = last.rows, last.at.Sub(running.from).Seconds(), last.at
		row.backlogRunning = true
	}
	row.steadyPruned = last.rows - row.backlog
	row.steadyTook = last.at.Sub(backlogEnd)

	var during, outside []time.Duration
	for _, p := range posts {
		if p.answered.IsZero() {
			continue
		}
		if p.at.After(backlogEnd) && !p.at.After(last.at) {
			row.steadySent++
		}
		in := false
		for _, w := range passes {
			if !p.at.Before(w.from) && !p.at.After(w.to) {
				in = true
				break
			}
		}
		if in {
			during = append(during, p.answered.Sub(p.at))
		} else {
			outside = append(outside, p.answered.Sub(p.at))
		}
	}
	row.during, row.outside = len(during), len(outside)
	pd, po := newPercentiles(during), newPercentiles(outside)
	row.duringP50, row.duringP99 = pd.at(0.50), pd.at(0.99)
	row.outsideP50, row.outsideP99 = po.at(0.50), po.at(0.99)

	var sized []retentionSample
	for _, s := range samples {
		if s.size >= 0 {
			sized = append(sized, s)
		}
	}
	if len(sized) > 0 {
		row.sizeStart, row.sizeEnd = sized[0].size, sized[len(sized)-1].size
		row.sizeMin = slices.MinFunc(sized, func(a, b retentionSample) int { return cmp.Compare(a.size, b.size) }).size
		mid := sort.Search(len(sized), func(i int) bool { return sized[i].at.Sub(began) >= row.took/2 })
		if mid < len(sized) {
			row.grown = row.sizeEnd - sized[mid].size
		}
	}
	unfinished := ""
	if row.backlogRunning {
		unfinished = " (not ended)"
	}
	logf("scale %s retention: %s pruned in %d passes (%.1f s of passes); the backlog %s in %.1f s%s; then %s in %s while %d were sent; intake p50/p99 during passes %s / %s (%d), outside %s / %s (%d); size %s → least %s → %s (%+d bytes over the second half)",
		r.engine, strconv.FormatFloat(row.pruned, 'f', 0, 64), row.passes, row.passSeconds,
		strconv.FormatFloat(row.backlog, 'f', 0, 64), row.backlogSeconds, unfinished,
		strconv.FormatFloat(row.steadyPruned, 'f', 0, 64), row.steadyTook.Round(time.Second), row.steadySent,
		ms(row.duringP50), ms(row.duringP99), row.during, ms(row.outsideP50), ms(row.outsideP99), row.outside,
		mib(row.sizeStart), mib(row.sizeMin), mib(row.sizeEnd), row.grown)
	return row
}

// window is a span of the phase a pass ran in.
type window struct{ from, to time.Time }

// retentionPasses finds the passes in the metrics' samples (the phase
// began at began). A pass ended between two samples whose seconds differ;
// it ran for that difference before it ended: the window [previous sample
// − its seconds, this sample] holds it (a second wider at most).
// backlogAt is the sample that first saw a pass end (the week's), or −1.
// A pass still running at the end (running, also the last of passes): its
// batches' rows are counted as they commit, its time only when it ends; it
// began before the first sample that saw rows the last ended pass had not.
func retentionPasses(began time.Time, samples []retentionSample) (passes []window, backlogAt int, running *window) {
	backlogAt = -1
	if samples[0].seconds > 0 {
		// The first pass runs as the cloud starts, before the first sample.
		passes = append(passes, window{began, samples[0].at})
		backlogAt = 0
	}
	ended := 0 // the sample that saw the last pass end
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		if ds := cur.seconds - prev.seconds; ds > 0 {
			passes = append(passes, window{prev.at.Add(-time.Duration(ds * float64(time.Second))), cur.at})
			if backlogAt < 0 {
				backlogAt = i
			}
			ended = i
		}
	}
	last := samples[len(samples)-1]
	if samples[0].seconds == 0 && ended == 0 && samples[0].rows > 0 {
		running = &window{began, last.at} // the first, since the cloud started
	}
	for i := ended + 1; running == nil && i < len(samples); i++ {
		if samples[i].rows > samples[i-1].rows {
			running = &window{samples[i-1].at, last.at}
		}
	}
	if running != nil {
		passes = append(passes, *running)
	}
	return passes, backlogAt, running
}
