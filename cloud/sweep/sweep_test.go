package sweep

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

var start = time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup opens a store with host h1 (claim code valid one hour) and one
// delivery leased for 30 s at start.
func setup(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	st := sqlitetest.Open(t)
	_, err := st.HostCreate(ctx, &store.HostCreateParams{ID: "h1", Name: "h1", ClaimCodeHash: []byte("c"), ClaimExpiresAt: start.Add(time.Hour), Now: start})
	require.NoError(t, err)
	insert(t, st, "e1", start)
	leased, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h1", Max: 10, MaxBytes: 1 << 20, LeaseFor: 30 * time.Second, Now: start})
	require.NoError(t, err)
	require.Len(t, leased.Deliveries, 1)
	// Handed out: the heartbeat's answer was written.
	_, err = st.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: "h1", IDs: []string{leased.Deliveries[0].ID}, Now: start})
	require.NoError(t, err)
	return st
}

func insert(t *testing.T, st store.Store, event string, at time.Time) string {
	t.Helper()
	res, err := st.DeliveryInsert(context.Background(), &store.DeliveryInsertParams{
		ID: "github:" + event + ":1", HostID: "h1", Source: "github", EventID: event, RawBody: []byte("{}"),
		Headers: map[string]string{}, ReceivedAt: at,
	})
	require.NoError(t, err)
	return res.Delivery.ID
}

func status(t *testing.T, st store.Store, id string) store.Status {
	t.Helper()
	d, err := st.DeliveryGet(context.Background(), "h1", id)
	require.NoError(t, err)
	return d.Status
}

func TestExpireLeasesExpiresOnlyEndedLeases(t *testing.T) {
	st := setup(t)
	ctx := context.Background()
	job := ExpireLeases(st, delivery.DefaultRetryPolicy, nil)
	n, err := job.Do(ctx, start.Add(29*time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "lease still valid")
	now := start.Add(31 * time.Second)
	n, err = job.Do(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d, err := st.DeliveryGet(ctx, "h1", "github:e1:1")
	require.NoError(t, err)
	require.Equal(t, store.StatusRetrying, d.Status)
	require.Equal(t, now.Add(30*time.Second), d.NextRetryAt.UTC())
	n, err = job.Do(ctx, now)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left")
}

func TestExpireClaimCodes(t *testing.T) {
	st := setup(t)
	ctx := context.Background()
	job := ExpireClaimCodes(st)
	n, err := job.Do(ctx, start.Add(59*time.Minute))
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = job.Do(ctx, start.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h, err := st.HostGet(ctx, "h1")
	require.NoError(t, err)
	require.Nil(t, h.ClaimCodeHash)
}

func TestRetentionPrunesFinishedDeliveriesAndPluggedTables(t *testing.T) {
	st := setup(t)
	ctx := context.Background()
	// e1 is acked at start; e2 dead-lettered at start; e3 stays queued.
	_, err := st.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: "h1", IDs: []string{"github:e1:1"}, Now: start})
	require.NoError(t, err)
	dead := insert(t, st, "e2", start)
	res, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h1", Max: 1, LeaseFor: time.Minute, Now: start})
	require.NoError(t, err)
	require.Len(t, res.Deliveries, 1)
	_, err = st.DeliveryNack(ctx, delivery.NackParams("h1", []delivery.Nack{{ID: dead, Retryable: false}}, delivery.RetryPolicy{}, start))
	require.NoError(t, err)
	queued := insert(t, st, "e3", start)

	// Another table's pruning plugs in with one line.
	var mu sync.Mutex
	var calls []store.PruneParams
	other := Pruner{Name: "other", Retain: time.Hour, Prune: func(_ context.Context, p *store.PruneParams) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, *p)
		return 0, nil
	}}
	never := Pruner{Name: "never", Retain: 0, Prune: func(context.Context, *store.PruneParams) (int, error) {
		t.Error("a pruner retaining forever must not run")
		return 0, nil
	}}
	job := Retention(clockwork.NewFakeClockAt(start), OneWriterBatchTime, append(DeliveryPruners(st, 7*24*time.Hour, 3*24*time.Hour), other, never)...)

	now := start.Add(3*24*time.Hour + time.Millisecond)
	n, err := job.Do(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the dead letter, past 3 days")
	_, err = st.DeliveryGet(ctx, "h1", dead)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, store.StatusAcked, status(t, st, "github:e1:1"), "acked: kept 7 days")
	require.Equal(t, []store.PruneParams{{Before: now.Add(-time.Hour), Limit: retentionFirst}}, calls)

	n, err = job.Do(ctx, start.Add(7*24*time.Hour+time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = st.DeliveryGet(ctx, "h1", "github:e1:1")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, store.StatusQueued, status(t, st, queued), "unfinished work is never pruned")

	// One failing pruner does not stop the others, and its error is reported.
	boom := Pruner{Name: "boom", Retain: time.Hour, Prune: func(context.Context, *store.PruneParams) (int, error) {
		return 0, errors.New("disk on fire")
	}}
	calls = nil // batches of RetentionBatch without a batch time
	n, err = Retention(clockwork.NewFakeClockAt(start), 0, boom, other).Do(ctx, now)
	require.ErrorContains(t, err, "prune boom: disk on fire")
	require.Zero(t, n)
	require.Equal(t, []store.PruneParams{{Before: now.Add(-time.Hour), Limit: RetentionBatch}}, calls)
}

// TestRetentionRestsBetweenFullBatches: after each full batch the pass
// waits as long as the batch took, on the clock; after the last, it does
// not. With a batch time each batch is sized from the last one's time: a
// slow store's batches shrink to what takes that time, a fast one's grow
// to RetentionBatch, at most doubling; without one, every batch is of
// RetentionBatch.
func TestRetentionRestsBetweenFullBatches(t *testing.T) {
	for _, tc := range []struct {
		name      string
		batchTime time.Duration
		perRow    time.Duration
		left      int
		limits    []int
	}{
		// 1 ms a row: 10 rows take 10 ms, so 5 take 5 ms.
		{"slow", OneWriterBatchTime, time.Millisecond, 10 + 5 + 5 + 3, []int{10, 5, 5, 5}},
		// 10 µs a row: 10 rows take 0.1 ms; doubling up to the most.
		{"fast", OneWriterBatchTime, 10 * time.Microsecond, 10 + 20 + 40 + 80 + 100 + 1, []int{10, 20, 40, 80, 100, 100}},
		{"no batch time", 0, time.Millisecond, 2*RetentionBatch + 7, []int{RetentionBatch, RetentionBatch, RetentionBatch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(start)
			left, total := tc.left, tc.left
			var limits []int
			var at, rests []time.Duration
			batch := Pruner{Name: "acked", Retain: time.Hour, Prune: func(_ context.Context, p *store.PruneParams) (int, error) {
				limits = append(limits, p.Limit)
				at = append(at, clock.Since(start))
				k := min(left, p.Limit)
				left -= k
				clock.Advance(time.Duration(k) * tc.perRow) // the batch's own time
				return k, nil
			}}
			done := make(chan int)
			go func() {
				n, err := Retention(clock, tc.batchTime, batch).Do(context.Background(), start)
				require.NoError(t, err)
				done <- n
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range len(tc.limits) - 1 { // a rest after each full batch
				require.NoError(t, clock.BlockUntilContext(ctx, 1), "resting")
				rest := time.Duration(tc.limits[i]) * tc.perRow
				rests = append(rests, rest)
				clock.Advance(rest)
			}
			require.Equal(t, total, <-done)
			require.Equal(t, tc.limits, limits)
			want := []time.Duration{0}
			for _, r := range rests {
				want = append(want, want[len(want)-1]+2*r) // the batch, then as long again
			}
			require.Equal(t, want, at, "each batch after the rest its previous one earned")
		})
	}
}

func TestDrainWorksInBoundedBatches(t *testing.T) {
	left := 7
	var limits []int
	n, err := drain(context.Background(), 3, func(limit int) (int, error) {
		limits = append(limits, limit)
		k := min(left, limit)
		left -= k
		return k, nil
	}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	require.Equal(t, []int{3, 3, 3}, limits, "3 + 3 + 1, then it stops")

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	n, err = drain(ctx, 3, func(limit int) (int, error) {
		calls++
		cancel()
		return limit, nil
	}, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 3, n)
	require.Equal(t, 1, calls, "stops when the context ends")
}

// TestRunnerLoops drives two jobs on a fake clock: each runs at once, then
// an interval after its previous pass, and both stop with the context.
func TestRunnerLoops(t *testing.T) {
	clock := clockwork.NewFakeClockAt(start)
	var mu sync.Mutex
	var runs []string
	job := func(name string, every time.Duration) Job {
		return Job{Name: name, Interval: every, Do: func(_ context.Context, now time.Time) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, name+"@"+now.Sub(start).String())
			return 1, nil
		}}
	}
	r := &Runner{Clock: clock, Log: discard(), Jobs: []Job{job("fast", time.Second), job("slow", time.Minute)}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()

	// Each loop arms its timer after its pass: two waiters mean both passes
	// are done.
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	for range 60 {
		clock.Advance(time.Second)
		require.NoError(t, clock.BlockUntilContext(ctx, 2))
	}
	cancel()
	<-done

	mu.Lock()
	defer mu.Unlock()
	var fast, slow []string
	for _, r := range runs {
		if r[0] == 'f' {
			fast = append(fast, r)
		} else {
			slow = append(slow, r)
		}
	}
	require.Len(t, fast, 61, "at once, then every second for a minute")
	require.Equal(t, "fast@0s", fast[0])
	require.Equal(t, "fast@1m0s", fast[60])
	require.Equal(t, []string{"slow@0s", "slow@1m0s"}, slow)
}

type foldFunc func(ctx context.Context, p *store.DeliveryCountFoldParams) (int, error)

func (f foldFunc) DeliveryCountFold(ctx context.Context, p *store.DeliveryCountFoldParams) (int, error) {
	return f(ctx, p)
}

// TestFoldCountsDrainsQuietly: a pass folds in bounded batches until one
// folds fewer than its limit, and the Runner logs such a pass only when
// it fails (it folds some on nearly every pass).
func TestFoldCountsDrainsQuietly(t *testing.T) {
	left := 2*10*DefaultBatch + 5
	var limits []int
	fail := false
	job := FoldCounts(foldFunc(func(_ context.Context, p *store.DeliveryCountFoldParams) (int, error) {
		if fail {
			return 0, errors.New("boom")
		}
		limits = append(limits, p.Limit)
		k := min(left, p.Limit)
		left -= k
		return k, nil
	}))
	require.True(t, job.Quiet)
	var logged strings.Builder
	r := &Runner{Clock: clockwork.NewFakeClockAt(start), Log: slog.New(slog.NewTextHandler(&logged, nil))}
	r.pass(context.Background(), job)
	require.Equal(t, []int{10 * DefaultBatch, 10 * DefaultBatch, 10 * DefaultBatch}, limits)
	require.Zero(t, left)
	require.Empty(t, logged.String(), "a pass that folded is not logged")
	fail = true
	r.pass(context.Background(), job)
	require.Contains(t, logged.String(), "boom", "a failure is")
}

type volumeFoldFunc func(ctx context.Context, p *store.VolumeFoldParams) (int, error)

func (f volumeFoldFunc) DeliveryVolumeFold(ctx context.Context, p *store.VolumeFoldParams) (int, error) {
	return f(ctx, p)
}

// TestFoldVolumeCatchesUp: a pass folds up to VolumeFoldLag before now,
// again and again until a fold writes nothing (an hour at a time: a store
// a day behind catches up in one pass), and at most twice a day's hours.
func TestFoldVolumeCatchesUp(t *testing.T) {
	behind := 25
	var untils []time.Time
	job := FoldVolume(volumeFoldFunc(func(_ context.Context, p *store.VolumeFoldParams) (int, error) {
		untils = append(untils, p.Until)
		if behind == 0 {
			return 0, nil
		}
		behind--
		return 3, nil
	}))
	require.True(t, job.Quiet)
	n, err := job.Do(context.Background(), start)
	require.NoError(t, err)
	require.Equal(t, 25*3, n)
	require.Len(t, untils, 26)
	for _, u := range untils {
		require.Equal(t, start.Add(-VolumeFoldLag), u)
	}
	behind = 1000
	untils = nil
	_, err = job.Do(context.Background(), start)
	require.NoError(t, err)
	require.Len(t, untils, 2*store.MaxVolumeHours, "bounded")
}

// TestRunnerMetrics: each pass adds its rows and the time it took on the
// Runner's clock to its job's series, a failed pass counts as one, and
// every job's series reads 0 before its first pass.
func TestRunnerMetrics(t *testing.T) {
	clock := clockwork.NewFakeClockAt(start)
	fail := false
	prune := Job{Name: "retention", Interval: time.Minute, Do: func(context.Context, time.Time) (int, error) {
		clock.Advance(1500 * time.Millisecond)
		if fail {
			return 2, errors.New("boom")
		}
		return 1000, nil
	}}
	idle := Job{Name: "claim-code expiry", Interval: time.Minute, Do: func(context.Context, time.Time) (int, error) { return 0, nil }}
	m := NewMetrics(prune, idle)
	r := &Runner{Clock: clock, Log: discard(), Jobs: []Job{prune, idle}, Metrics: m}
	for _, c := range m.Collectors() {
		require.Len(t, collect(c), 2, "a series of each job from the start")
	}
	require.Zero(t, value(m.rows, "claim-code expiry"))

	r.pass(context.Background(), prune)
	r.pass(context.Background(), prune)
	fail = true
	r.pass(context.Background(), prune)
	require.Equal(t, 2002.0, value(m.rows, "retention"))
	require.Equal(t, 4.5, value(m.seconds, "retention"))
	require.Equal(t, 1.0, value(m.failures, "retention"))
	require.Zero(t, value(m.failures, "claim-code expiry"))

	// A pass that works in batches counts each batch's rows as it
	// commits, and its end adds only what they did not count.
	var seen []float64
	left := 7
	batched := Job{Name: "claim-code expiry", Interval: time.Minute, Do: func(ctx context.Context, _ time.Time) (int, error) {
		n, err := drain(ctx, 3, func(limit int) (int, error) {
			seen = append(seen, value(m.rows, "claim-code expiry"))
			k := min(left, limit)
			left -= k
			return k, nil
		}, nil)
		return n + 1, err // one more row, changed outside the batches
	}}
	r.pass(context.Background(), batched)
	require.Equal(t, []float64{0, 3, 6}, seen, "each batch's rows counted before the next")
	require.Equal(t, 8.0, value(m.rows, "claim-code expiry"))

	var none *Metrics
	require.NotPanics(t, func() { none.observe("retention", 1, 1, true) }, "a Runner without metrics")
	require.NotPanics(t, func() { count(context.Background(), 1) }, "a batch outside a pass")
}

// collect is what c exports, each series as the registry would read it.
func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var all []prometheus.Metric
	for m := range ch {
		all = append(all, m)
	}
	return all
}

// value is the counter of v's series for job.
func value(v *prometheus.CounterVec, job string) float64 {
	var d dto.Metric
	if err := v.WithLabelValues(job).Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}
