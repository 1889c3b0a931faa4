// Package sweep runs the cloud's background upkeep, each job in its own loop
// on an injected clock: lease expiry (an expired lease is a failed attempt),
// retention (finished deliveries, and any other table's old rows, pruned in
// bounded batches), claim-code expiry, the folding of the deliveries'
// counts and of their volume per hour, and the planner's statistics.
//
// Every job is a guarded update or a bounded delete that skips rows another
// replica holds, so every replica may run every job at once; on SQLite the
// one writer serializes them.
package sweep

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// DefaultBatch is how many rows one transaction of a job changes at most.
const DefaultBatch = 1000

// Job is one kind of upkeep. Do makes one pass at now and says how many rows
// it changed.
type Job struct {
	Name     string
	Interval time.Duration
	Do       func(ctx context.Context, now time.Time) (int, error)
	// Quiet: a pass that changed rows is not logged (only a failure is),
	// for a job that changes some on nearly every pass.
	Quiet bool
}

// Runner runs jobs until its context ends.
type Runner struct {
	Clock   clockwork.Clock
	Log     *slog.Logger
	Jobs    []Job
	Metrics *Metrics // nil: none
}

// Run runs each job at once and then Interval after its previous pass ended,
// each in its own goroutine, and returns when ctx ends and every loop has
// stopped.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, j := range r.Jobs {
		wg.Go(func() { r.loop(ctx, j) })
	}
	wg.Wait()
}

func (r *Runner) loop(ctx context.Context, j Job) {
	r.pass(ctx, j)
	// A timer re-armed after each pass, not a ticker: a slow pass never
	// piles up the next ones.
	t := r.Clock.NewTimer(j.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			r.pass(ctx, j)
			t.Reset(j.Interval)
		}
	}
}

func (r *Runner) pass(ctx context.Context, j Job) {
	began := r.Clock.Now()
	t := &tally{add: func(n int) { r.Metrics.addRows(j.Name, n) }}
	n, err := j.Do(context.WithValue(ctx, tallyKey{}, t), began.UTC().Truncate(time.Millisecond))
	took := r.Clock.Since(began)
	failed := err != nil && ctx.Err() == nil
	r.Metrics.observe(j.Name, n-t.counted, took.Seconds(), failed)
	switch {
	case failed:
		r.Log.Warn("sweep failed", "job", j.Name, "done", n, "took", took, "err", err)
	case n > 0 && !j.Quiet:
		r.Log.Info("sweep", "job", j.Name, "count", n, "took", took)
	}
}

// tallyKey carries, in a pass's context, the tally its batches count
// their rows into as each one commits (Runner.pass): a pass that prunes a
// backlog for minutes shows its progress in the rows' metric, not only
// when it ends.
type tallyKey struct{}

type tally struct {
	counted int // rows already counted; a pass's batches run one at a time
	add     func(n int)
}

// count tells the pass running in ctx, if any, that a batch changed n
// rows.
func count(ctx context.Context, n int) {
	if t, ok := ctx.Value(tallyKey{}).(*tally); ok && n > 0 {
		t.counted += n
		t.add(n)
	}
}

// drain calls step with limit until it changes fewer rows than that, and
// returns the total. After each full batch, then (when not nil) says the
// next batch's limit, and may rest first.
func drain(ctx context.Context, limit int, step func(limit int) (int, error), then func(limit int) int) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, err := step(limit)
		total += n
		count(ctx, n)
		if err != nil {
			return total, err
		}
		if n < limit {
			break
		}
		if then != nil {
			limit = then(limit)
		}
	}
	return total, ctx.Err()
}

// ExpireLeases turns every lease that ended into a failed attempt, on each
// delivery's own retry schedule (fallback for deliveries without one), every
// second; a group's any delivery goes to another member when groups has
// one online (delivery.Groups.Handover; groups may be nil).
func ExpireLeases(st interface {
	DeliveryExpireLeases(ctx context.Context, p *store.DeliveryExpireLeasesParams) (int, error)
}, fallback delivery.RetryPolicy, groups *delivery.Groups) Job {
	return Job{Name: "lease expiry", Interval: time.Second, Do: func(ctx context.Context, now time.Time) (int, error) {
		return drain(ctx, DefaultBatch, func(limit int) (int, error) {
			p := delivery.ExpireLeasesParams(fallback, limit, now)
			p.Fail = groups.Handover(p.Fail, now)
			return st.DeliveryExpireLeases(ctx, p)
		}, nil)
	}}
}

// ExpireClaimCodes clears expired claim codes every minute.
func ExpireClaimCodes(st interface {
	HostExpireClaimCodes(ctx context.Context, p *store.HostExpireClaimCodesParams) (int, error)
}) Job {
	return Job{Name: "claim-code expiry", Interval: time.Minute, Do: func(ctx context.Context, now time.Time) (int, error) {
		return drain(ctx, DefaultBatch, func(limit int) (int, error) {
			return st.HostExpireClaimCodes(ctx, &store.HostExpireClaimCodesParams{Limit: limit, Now: now})
		}, nil)
	}}
}

// FoldCounts folds the changes writers recorded to the counts of
// deliveries by host and status into those counts, every 5 seconds, so
// that a read of the counts adds up few of them (store.DeliveryCountFold).
func FoldCounts(st interface {
	DeliveryCountFold(ctx context.Context, p *store.DeliveryCountFoldParams) (int, error)
}) Job {
	return Job{Name: "count folding", Interval: 5 * time.Second, Quiet: true, Do: func(ctx context.Context, now time.Time) (int, error) {
		return drain(ctx, 10*DefaultBatch, func(limit int) (int, error) {
			return st.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{Limit: limit})
		}, nil)
	}}
}

// VolumeFoldLag is how far behind now the volume is folded: what
// happened before it has been committed (a transaction that took longer
// is not counted in its hour), and what came after is counted as it
// stands by whoever reads the volume.
const VolumeFoldLag = 2 * time.Minute

// FoldVolume keeps the webhooks per hour, host and outcome of what
// happened up to VolumeFoldLag ago, every minute, an hour at a time until
// it has caught up (store.DeliveryVolumeFold), so that the volume chart
// reads the hours kept and counts only the last minutes.
func FoldVolume(st interface {
	DeliveryVolumeFold(ctx context.Context, p *store.VolumeFoldParams) (int, error)
}) Job {
	return Job{Name: "volume folding", Interval: time.Minute, Quiet: true, Do: func(ctx context.Context, now time.Time) (int, error) {
		total := 0
		for range 2 * store.MaxVolumeHours { // a day and more to catch up, at most
			n, err := st.DeliveryVolumeFold(ctx, &store.VolumeFoldParams{Until: now.Add(-VolumeFoldLag)})
			total += n
			if err != nil || n == 0 {
				return total, err
			}
		}
		return total, nil
	}}
}

// Statistics refreshes the query planner's statistics every hour, where
// the engine leaves that to the application (store.StatsOptimize).
func Statistics(st interface {
	StatsOptimize(ctx context.Context) error
}) Job {
	return Job{Name: "planner statistics", Interval: time.Hour, Do: func(ctx context.Context, now time.Time) (int, error) {
		return 0, st.StatsOptimize(ctx)
	}}
}

// PruneFunc deletes at most p.Limit rows older than p.Before and says how
// many it deleted.
type PruneFunc func(ctx context.Context, p *store.PruneParams) (int, error)

// Pruner is one kind of row that retention deletes once it is older than
// Retain.
type Pruner struct {
	Name   string
	Retain time.Duration // 0 or less: kept forever
	Prune  PruneFunc
}

// DeliveryPruners prune acked and dead-lettered deliveries, with their audit
// trails, once they have not changed for acked and dlq respectively.
func DeliveryPruners(st interface {
	DeliveryPrune(ctx context.Context, p *store.DeliveryPruneParams) (int, error)
}, acked, dlq time.Duration) []Pruner {
	by := func(status store.Status) PruneFunc {
		return func(ctx context.Context, p *store.PruneParams) (int, error) {
			return st.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: status, PruneParams: *p})
		}
	}
	return []Pruner{
		{Name: "acked deliveries", Retain: acked, Prune: by(store.StatusAcked)},
		{Name: "dead-lettered deliveries", Retain: dlq, Prune: by(store.StatusDLQ)},
	}
}

// RetentionBatch is how many rows one retention transaction deletes at
// most. A delivery goes with its body, audit trail and result, and an
// entry in each of its table's indexes, each at a random page: on a SQLite
// store of a million deliveries of 15 KB bodies, 0.37 ms each, so that a
// batch of 1,000 held the one writer for 370 ms and intake's commits
// waited behind it (a backlog pruned that way took intake's p50 from 41 ms
// to 843 ms).
const RetentionBatch = 100

// OneWriterBatchTime is how long a retention transaction should hold a
// store that has one writer (embedded SQLite), where intake's commits wait
// for it: each batch after the first is sized from the last one's time to
// take about that long. On a store whose writers lock only their rows
// (Postgres) batches are of RetentionBatch: small ones there only cost
// more commits and a longer pass.
const OneWriterBatchTime = 5 * time.Millisecond

// retentionFirst is the first batch of a pass sized by time, before any
// time is known.
const retentionFirst = 10

// Retention runs every pruner every minute. Batches are of RetentionBatch,
// or, with batchTime > 0, sized to take about batchTime each (between 1
// and RetentionBatch rows). After a full batch it rests on clock as long as
// that batch took: a backlog to prune (the first pass after retention was
// shortened or the cloud was down a while) then takes at most half of the
// store's time. One pruner failing does not stop the others.
func Retention(clock clockwork.Clock, batchTime time.Duration, pruners ...Pruner) Job {
	return Job{Name: "retention", Interval: time.Minute, Do: func(ctx context.Context, now time.Time) (int, error) {
		total := 0
		var firstErr error
		for _, p := range pruners {
			if p.Retain <= 0 {
				continue
			}
			n, err := paced(ctx, clock, batchTime, func(limit int) (int, error) {
				return p.Prune(ctx, &store.PruneParams{Before: now.Add(-p.Retain), Limit: limit})
			})
			total += n
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("prune %s: %w", p.Name, err)
			}
		}
		return total, firstErr
	}}
}

// paced drains step resting after each full batch as long as it took on
// clock; with batchTime > 0 each batch's limit is sized from the last
// one's time (nextBatch).
func paced(ctx context.Context, clock clockwork.Clock, batchTime time.Duration, step func(limit int) (int, error)) (int, error) {
	limit := RetentionBatch
	if batchTime > 0 {
		limit = retentionFirst
	}
	var began time.Time
	timed := func(limit int) (int, error) {
		began = clock.Now()
		return step(limit)
	}
	return drain(ctx, limit, timed, func(limit int) int {
		took := clock.Since(began)
		if batchTime > 0 {
			limit = nextBatch(limit, took, batchTime)
		}
		if took > 0 {
			select {
			case <-ctx.Done():
			case <-clock.After(took):
			}
		}
		return limit
	})
}

// nextBatch is the limit after a full batch of limit rows that took took:
// as many as take batchTime at that pace, at most twice as many as before,
// between 1 and RetentionBatch.
func nextBatch(limit int, took, batchTime time.Duration) int {
	next := 2 * limit
	if took > 0 {
		next = min(next, int(int64(limit)*int64(batchTime)/int64(took)))
	}
	return max(1, min(next, RetentionBatch))
}
