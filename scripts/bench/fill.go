package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/scripts/internal/rig"
	"github.com/relaykit/relay/shared/telemetry"
)

// The scale scenario's loader: a store filled with n deliveries as a week
// of real traffic leaves it, written by the cloud's own code rather than
// by SQL of its own, so that the rows, bodies, audit events and kept
// counts are exactly the cloud's:
//
//   - each webhook goes through the intake's Admit (cloud/intake: the
//     event's id, type and action read by its provider, the headers kept
//     as the source's filter keeps them, a traceparent and a correlation
//     id, the dedupe insert) over store.GroupCommit, as the cloud's edge
//     calls it once a request's signature is verified — only the HTTP
//     request and the signature check are left out;
//   - then each host takes its deliveries as its socket (the host's
//     default transport) does (DeliveryLease) and reports them as a host
//     does (DeliveryReport: acks that record the delivery written, nacks
//     built by delivery.NackParams, and its ledger's results).
//
// Webhooks are received evenly over fillSpan ending at fill.end, spread
// over the hosts, of the bench's payload mix with event ids as -ids makes
// them. They are admitted in rounds of a day's traffic (below 7,000
// webhooks fewer and longer: one a thousand, one at the least), each in
// windows of a 24th of it (an hour) taken by their hosts at the window's
// end (takeWindow), but the last round, which every host takes at its
// end. fillShareDLQ of them fail for good (a nack not retryable:
// dead-lettered), fillShareRetrying fail once in the last round and wait
// to be retried, the newest fillSharePending are never taken (queued),
// and the rest are acked.
const (
	fillSpan          = 7 * 24 * time.Hour
	fillRounds        = 7
	fillShareDLQ      = 0.02
	fillShareRetrying = 0.02
	fillSharePending  = 0.01
	fillWindows       = 24 // of a round
)

// fill writes the deliveries of the scale scenario into st.
type fill struct {
	st    store.Store // opened as the cloud opens it, migrated
	hosts []string    // each with a source of each provider of mix
	mix   *payloadMix
	ids   *ids
	end   time.Time // the newest webhook's receipt
	// writers are the webhooks admitted at once (their inserts share
	// transactions, as the cloud's do); flushers, the transactions open
	// at once (the cloud's: 1 on SQLite, 2 on Postgres); takers, the hosts
	// taking their deliveries at once.
	writers, flushers, takers int
	// publicURL is the cloud's, for each request's URL.
	publicURL string
	logf      func(format string, args ...any)
}

// fillResult is what a fill wrote, and how long it took.
type fillResult struct {
	admitted  int // by the loader
	copied    int // by copyFill, after the loader (-scale-base)
	copyTook  time.Duration
	byFate    map[store.Status]int // the status each delivery was left in, as the loader chose it (copies included)
	took      time.Duration        // the loader's and the copies' time
	lastTaken time.Time            // the time of the last round's transitions
}

// run admits n webhooks and moves them to the statuses a week leaves.
func (f *fill) run(ctx context.Context, n int) (*fillResult, error) {
	res := &fillResult{byFate: map[store.Status]int{}}
	if n <= 0 {
		return res, nil
	}
	start := time.Now()
	// The loader's store: group commit over st, which it leaves open.
	g := store.GroupCommit(unclosed{f.st}, store.GroupOptions{Flushers: f.flushers, MaxBatch: 512})
	defer g.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	// A key of its own: the sources' secrets, sealed with the cloud's
	// key, do not open with it, which the intake only notes (Target's
	// KeysErr) — the signature check they serve is not the loader's.
	ring, err := secrets.NewRing(key)
	if err != nil {
		return nil, err
	}
	svc := intake.New(intake.Config{Store: g, Ring: ring, Leaser: noLeaser{}, Metrics: noMetrics{},
		Tracer: &telemetry.Tracer{}, Now: time.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

	pending := int(math.Round(float64(n) * fillSharePending))
	taken := n - pending
	rounds := max(1, min(fillRounds, taken/1000))
	for r := 0; r < rounds; r++ {
		from, to := taken*r/rounds, taken*(r+1)/rounds
		// Every round but the last is admitted and taken in fillWindows
		// windows, each taken by its hosts just after its last webhook;
		// the last round at once, taken a second after its last webhook,
		// where fillShareRetrying of every delivery fails once and waits
		// for its retry.
		windows := fillWindows
		takeAt := func(lo, hi int) (time.Time, error) {
			at := f.receivedAt(n, hi-1).Add(takenAfter)
			return at, f.takeWindow(ctx, lo, hi, at, res.byFate)
		}
		if r == rounds-1 {
			windows = 1
			retrying := min(0.5, fillShareRetrying*float64(n)/float64(max(1, to-from)))
			takeAt = func(_, hi int) (time.Time, error) {
				at := f.receivedAt(n, hi-1).Add(time.Second)
				return at, f.take(ctx, at, retrying, res.byFate)
			}
		}
		var admitted, took time.Duration
		var at time.Time
		for w := range windows {
			lo, hi := from+(to-from)*w/windows, from+(to-from)*(w+1)/windows
			if lo == hi {
				continue
			}
			t0 := time.Now()
			if err := f.admit(ctx, svc, n, lo, hi); err != nil {
				return nil, err
			}
			t1 := time.Now()
			admitted += t1.Sub(t0)
			if at, err = takeAt(lo, hi); err != nil {
				return nil, err
			}
			took += time.Since(t1)
		}
		res.admitted = to
		res.lastTaken = at
		// The cloud folds the counts' change log every 5 s (Postgres:
		// sweep.FoldCounts); a day's worth left unfolded is no store's.
		if err := f.fold(ctx); err != nil {
			return nil, err
		}
		f.logf("fill: %d of %d admitted (%.0f/s) and taken (%.0f/s); %s in all", to, n,
			float64(to-from)/admitted.Seconds(), float64(to-from)/took.Seconds(), time.Since(start).Round(time.Second))
	}
	if err := f.admit(ctx, svc, n, taken, n); err != nil {
		return nil, err
	}
	if err := f.fold(ctx); err != nil {
		return nil, err
	}
	res.admitted = n
	res.byFate[store.StatusQueued] += pending
	res.took = time.Since(start)
	return res, nil
}

// fold folds every change recorded to the kept counts into them, as the
// cloud's sweep does (none on SQLite, which keeps them in place).
func (f *fill) fold(ctx context.Context) error {
	for {
		n, err := f.st.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{Limit: 10000})
		if err != nil {
			return fmt.Errorf("fill: fold the counts: %w", err)
		}
		if n == 0 {
			return nil
		}
	}
}

// receivedAt is when webhook i of n was received: evenly over fillSpan,
// the last at f.end.
func (f *fill) receivedAt(n, i int) time.Time {
	return f.end.Add(-fillSpan + time.Duration(float64(fillSpan)*float64(i+1)/float64(n)))
}

// hostOf is the host webhook i goes to: a fixed pseudo-random choice.
func (f *fill) hostOf(i int) string {
	x := uint64(i)*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return f.hosts[x%uint64(len(f.hosts))]
}

// admit admits webhooks from to to (of n), f.writers at once.
func (f *fill) admit(ctx context.Context, svc *intake.Service, n, from, to int) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next.Store(int64(from))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range f.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to || ctx.Err() != nil {
					return
				}
				if err := f.admitOne(ctx, svc, n, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// admitOne admits webhook i of n as the cloud's edge does once its
// signature is verified.
func (f *fill) admitOne(ctx context.Context, svc *intake.Service, n, i int) error {
	at := f.receivedAt(n, i)
	k := f.mix.kindOf(int64(i))
	w := k.build(f.ids.next(k.provider, int64(i)), at)
	host := f.hostOf(i)
	t, err := svc.Target(ctx, host, k.provider)
	if err != nil {
		return fmt.Errorf("fill: target %s/%s: %w", host, k.provider, err)
	}
	req := &verify.Request{Header: w.header, Body: w.body, Now: at, URL: rig.WebhookURL(f.publicURL, host, k.provider)}
	out, err := svc.Admit(ctx, t, req, "", at, intake.From{Guard: true})
	if err != nil {
		return fmt.Errorf("fill: admit webhook %d: %w", i, err)
	}
	if out.Outcome != intake.OutcomeQueued {
		return fmt.Errorf("fill: webhook %d (%s %s): %s, not queued", i, k.provider, k.name, out.Outcome)
	}
	return nil
}

// take has every host take what is available to it at at, as a
// heartbeat's answer, and report it: acked, or failed (fate).
func (f *fill) take(ctx context.Context, at time.Time, retrying float64, byFate map[store.Status]int) error {
	return f.takeHosts(ctx, f.hosts, at, retrying, byFate)
}

// takeWindow has the hosts of webhooks from to to take what is available
// to them at at, just after the last of them was received, as connected
// hosts take a window's traffic. Each delivery is then last changed within
// a window of its receipt and its trail written about then, as live
// traffic leaves a store: taken all at once at a day's end, the deliveries
// a retention batch selects (the oldest changed) were received hours
// apart, their rows, bodies and trails on as many pages.
func (f *fill) takeWindow(ctx context.Context, from, to int, at time.Time, byFate map[store.Status]int) error {
	var hosts []string
	seen := map[string]bool{}
	for i := from; i < to; i++ {
		if h := f.hostOf(i); !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return f.takeHosts(ctx, hosts, at, 0, byFate)
}

// takenAfter is how long after a window's last webhook its hosts take it.
const takenAfter = 5 * time.Millisecond

// A delivery taken at at is written by its handler writtenAfter later and
// reported reportedAfter later (takeHost).
const (
	writtenAfter  = 5 * time.Millisecond
	reportedAfter = 40 * time.Millisecond
)

// takeHosts has each of hosts take what is available to it at at (see
// takeHost), f.takers at once.
func (f *fill) takeHosts(ctx context.Context, hosts []string, at time.Time, retrying float64, byFate map[store.Status]int) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range max(1, f.takers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts := map[store.Status]int{}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hosts) || ctx.Err() != nil {
					break
				}
				if err := f.takeHost(ctx, hosts[i], at, retrying, counts); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					break
				}
			}
			mu.Lock()
			for s, c := range counts {
				byFate[s] += c
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}

// takeHost has the host take its available deliveries at at as its
// socket does, 500 at a time (DeliveryLease via the socket), and report
// each as the host reports what its handler did, with its result: an ack
// records the delivery written, then acked, in one change of its row (the
// socket's mark as delivered put off, as delivery.Marker puts it off); a
// failure is marked delivered, then nacked.
func (f *fill) takeHost(ctx context.Context, hostID string, at time.Time, retrying float64, counts map[store.Status]int) error {
	written := at.Add(writtenAfter)
	reported := at.Add(reportedAfter)
	for {
		leased, err := f.st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: hostID, Via: store.ViaSocket, Max: 500,
			MaxBytes: 64 << 20, LeaseFor: 2 * time.Minute, Now: at})
		if err != nil {
			return fmt.Errorf("fill: lease %s: %w", hostID, err)
		}
		if len(leased.Deliveries) == 0 {
			return nil
		}
		var acks, failed []string
		var unmarked []store.Written
		var nacks []delivery.Nack
		results := make([]store.DeliveryResult, 0, len(leased.Deliveries))
		for _, d := range leased.Deliveries {
			res := store.DeliveryResult{DeliveryID: d.ID, Attempt: d.Attempts, Handler: "forward", DurationMS: 12, ReportedAt: reported}
			switch fate := fateOf(d.EventID, retrying); fate {
			case store.StatusAcked:
				acks = append(acks, d.ID)
				unmarked = append(unmarked, store.Written{ID: d.ID, At: written})
				res.Result, res.ResponseStatus = "success", intPtr(200)
			default:
				status, msg := 500, "forward: 500 Internal Server Error"
				if fate == store.StatusDLQ {
					status, msg = 422, "forward: 422 Unprocessable Entity"
				}
				failed = append(failed, d.ID)
				nacks = append(nacks, delivery.Nack{ID: d.ID, Error: msg, Retryable: fate == store.StatusRetrying, Attempt: d.Attempts})
				res.Result, res.ResponseStatus, res.Error = "error", intPtr(status), msg
			}
			results = append(results, res)
		}
		if len(failed) > 0 {
			if _, err := f.st.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: hostID, IDs: failed,
				Now: written}); err != nil {
				return fmt.Errorf("fill: mark delivered %s: %w", hostID, err)
			}
		}
		p := &store.DeliveryReportParams{HostID: hostID, Results: results}
		if len(acks) > 0 {
			p.Ack = &store.DeliveryAckParams{HostID: hostID, IDs: acks, Written: unmarked, Now: reported}
		}
		if len(nacks) > 0 {
			p.Nack = delivery.NackParams(hostID, nacks, delivery.DefaultRetryPolicy, reported)
		}
		out, err := f.st.DeliveryReport(ctx, p)
		if err != nil {
			return fmt.Errorf("fill: report %s: %w", hostID, err)
		}
		if out.Acked != len(acks) || out.Nacked != len(nacks) {
			return fmt.Errorf("fill: report %s: %d acked and %d nacked of %d and %d", hostID, out.Acked, out.Nacked, len(acks), len(nacks))
		}
		counts[store.StatusAcked] += len(acks)
		for _, nk := range nacks {
			if nk.Retryable {
				counts[store.StatusRetrying]++
			} else {
				counts[store.StatusDLQ]++
			}
		}
		if !leased.More {
			return nil
		}
	}
}

// fateOf is what becomes of the delivery of event id once taken: a fixed
// pseudo-random choice by its id, dead-lettered with fillShareDLQ,
// retrying with retrying, else acked.
func fateOf(eventID string, retrying float64) store.Status {
	h := fnv.New64a()
	h.Write([]byte(eventID))
	u := float64(h.Sum64()>>11) / (1 << 53)
	switch {
	case u < fillShareDLQ:
		return store.StatusDLQ
	case u < fillShareDLQ+retrying:
		return store.StatusRetrying
	}
	return store.StatusAcked
}

func intPtr(v int) *int { return &v }

// unclosed is a store whose Close leaves it open: the group commit's
// Close stops its flushers and closes the store under it, which the
// loader's caller still reads.
type unclosed struct{ store.Store }

func (unclosed) Close() error { return nil }

// noLeaser holds no room: the loader's webhooks are stored pending, as
// they are for a host that is not connected.
type noLeaser struct{}

func (noLeaser) Reserve(string, int) *delivery.Reservation { return nil }
func (noLeaser) Pending(string)                            {}

// noMetrics counts nothing.
type noMetrics struct{}

func (noMetrics) Count(string, string) {}
func (noMetrics) QuarantineAdded()     {}
func (noMetrics) SetQuarantined(int)   {}
func (noMetrics) KeysOK(bool)          {}
