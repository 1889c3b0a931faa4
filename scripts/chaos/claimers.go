package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// lease is one lease a claimer got: the delivery was its own from start
// (the Now of the lease call) until end (start+LeaseFor, or the Now of the
// nack that ended it early).
type lease struct {
	claimer    int
	attempt    int
	start, end time.Time
}

// runClaimers: four claimers, each on its own store (its own connection
// pool), lease a host's deliveries in a loop on one database while a steady
// stream of deliveries is inserted and a sweeper expires leases. Claimers
// ack most of what they get (some late, after the lease ended), nack some
// and abandon some. Every (delivery, lease start, lease end) is recorded;
// no two leases of a delivery may overlap, every lease must show in the
// delivery's attempts, and every delivery must end acked.
func runClaimers(ctx context.Context, e *env) (r result) {
	pg, err := e.postgres(ctx)
	if err != nil {
		r.failf("postgres: %v", err)
		return
	}
	dbURL, err := pg.newDatabase(ctx, "claimers")
	if err != nil {
		r.failf("database: %v", err)
		return
	}
	engines := []struct {
		name string
		open func() (store.Store, error)
	}{
		{"postgres", func() (store.Store, error) { return postgres.Open(ctx, dbURL) }},
		{"sqlite", func() (store.Store, error) { return sqlite.Open(ctx, filepath.Join(e.dir("sqlite"), "cloud.db")) }},
	}
	for _, eng := range engines {
		e.claimersOn(ctx, &r, eng.name, eng.open, pick(e, 60*time.Second, 12*time.Second))
	}
	return r
}

func (e *env) claimersOn(ctx context.Context, r *result, engine string, open func() (store.Store, error), runFor time.Duration) {
	const claimers = 4
	const leaseFor = time.Second
	stores := make([]store.Store, claimers)
	for i := range stores {
		st, err := open()
		if err != nil {
			r.failf("%s: open: %v", engine, err)
			return
		}
		defer st.Close()
		stores[i] = st
	}
	if err := stores[0].Migrate(ctx); err != nil {
		r.failf("%s: migrate: %v", engine, err)
		return
	}
	now := time.Now()
	code := sha256.Sum256([]byte("chaos claim code"))
	hostID := "h_chaosclaimers"
	if _, err := stores[0].HostCreate(ctx, &store.HostCreateParams{ID: hostID, Name: "claimers", ClaimCodeHash: code[:],
		ClaimExpiresAt: now.Add(time.Hour), RateLimitPerMin: 0, Now: now}); err != nil {
		r.failf("%s: host: %v", engine, err)
		return
	}
	if _, err := stores[0].SourceUpsert(ctx, &store.SourceUpsertParams{HostID: hostID, Name: "github", Provider: "github",
		Enabled: true, Now: now}); err != nil {
		r.failf("%s: source: %v", engine, err)
		return
	}

	var (
		mu       sync.Mutex
		leases   = map[string][]*lease{}
		inserted atomic.Int64
		acks     atomic.Int64
		nacks    atomic.Int64
		dropped  atomic.Int64
		errs     atomic.Int64
		lastErr  atomic.Value
		draining atomic.Bool
	)
	noteErr := func(err error) {
		if ctx.Err() != nil || draining.Load() && strings.Contains(err.Error(), "context canceled") {
			return
		}
		errs.Add(1)
		lastErr.Store(err.Error())
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup

	// The insert stream: 100 a second.
	// It stops between inserts, never by canceling one: an insert canceled
	// mid-commit may be stored although it returned an error.
	var stopInserting atomic.Bool
	insertCtx := runCtx
	var inserter sync.WaitGroup
	inserter.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; !stopInserting.Load(); i++ {
			select {
			case <-insertCtx.Done():
				return
			case <-tick.C:
			}
			at := time.Now()
			ev := fmt.Sprintf("claim-%06d", i)
			_, err := stores[i%claimers].DeliveryInsert(insertCtx, &store.DeliveryInsertParams{
				ID: "github:" + ev + ":" + fmt.Sprint(at.UnixMilli()), HostID: hostID, Source: "github", EventID: ev,
				EventType: "push", Headers: map[string]string{"X-GitHub-Event": "push"}, RawBody: []byte(`{"seq":` + fmt.Sprint(i) + `}`),
				RetryDelays: []time.Duration{0, 200 * time.Millisecond}, MaxAttempts: 1000, ReceivedAt: at,
			})
			if err != nil {
				if insertCtx.Err() == nil {
					noteErr(err)
				}
				continue
			}
			inserted.Add(1)
		}
	})
	// The sweeper: lease expiry, as every replica runs it.
	wg.Go(func() {
		for i := 0; runCtx.Err() == nil; i++ {
			if _, err := stores[i%claimers].DeliveryExpireLeases(runCtx, delivery.ExpireLeasesParams(delivery.RetryPolicy{}, 1000, time.Now())); err != nil && runCtx.Err() == nil {
				noteErr(err)
			}
			select {
			case <-runCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	// The claimers.
	for c := range claimers {
		st := stores[c]
		wg.Go(func() {
			for runCtx.Err() == nil {
				start := time.Now()
				res, err := st.DeliveryLease(runCtx, &store.DeliveryLeaseParams{HostID: hostID, Max: 8, MaxBytes: 1 << 20, LeaseFor: leaseFor, Now: start})
				if err != nil {
					if runCtx.Err() == nil {
						noteErr(err)
					}
					continue
				}
				mu.Lock()
				for _, d := range res.Deliveries {
					leases[d.ID] = append(leases[d.ID], &lease{claimer: c, attempt: d.Attempts, start: start, end: start.Add(leaseFor)})
				}
				mu.Unlock()
				// Handed out, as by a heartbeat whose answer was written.
				if len(res.Deliveries) > 0 {
					handed := make([]string, len(res.Deliveries))
					for i, d := range res.Deliveries {
						handed[i] = d.ID
					}
					if _, err := st.DeliveryMarkDelivered(runCtx, &store.DeliveryMarkDeliveredParams{HostID: hostID, IDs: handed, Now: time.Now()}); err != nil && runCtx.Err() == nil {
						noteErr(err)
					}
				}
				for _, d := range res.Deliveries {
					roll := e.randInt(100)
					if draining.Load() {
						roll = 0
					}
					switch {
					case roll < 75: // acked, a few after the lease ended
						if !draining.Load() && e.randInt(40) == 0 {
							time.Sleep(e.randDur(time.Millisecond, 1500*time.Millisecond))
						}
						if _, err := st.DeliveryAck(runCtx, &store.DeliveryAckParams{HostID: hostID, IDs: []string{d.ID}, Now: time.Now()}); err != nil {
							noteErr(err)
							continue
						}
						acks.Add(1)
					case roll < 90: // nacked: the lease ends now
						at := time.Now()
						n, err := st.DeliveryNack(runCtx, delivery.NackParams(hostID,
							[]delivery.Nack{{ID: d.ID, Error: "chaos nack", Retryable: true, Attempt: d.Attempts}}, delivery.RetryPolicy{}, at))
						if err != nil {
							noteErr(err)
							continue
						}
						if n == 1 {
							mu.Lock()
							for _, l := range leases[d.ID] {
								if l.claimer == c && l.attempt == d.Attempts && at.Before(l.end) {
									l.end = at
								}
							}
							mu.Unlock()
						}
						nacks.Add(1)
					default: // abandoned: the lease expires
						dropped.Add(1)
					}
				}
				if len(res.Deliveries) == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}

	time.Sleep(runFor)
	stopInserting.Store(true)
	inserter.Wait()
	draining.Store(true)
	total := int(inserted.Load())
	e.logf("%s: %d inserted; draining", engine, total)
	t0 := time.Now()
	settled := waitFor(ctx, 60*time.Second, 250*time.Millisecond, "every delivery acked", func() bool {
		counts, err := stores[0].DeliveryCountByStatus(ctx, hostID)
		if err != nil {
			return false
		}
		pending := 0
		for st, n := range counts {
			if st != store.StatusAcked {
				pending += n
			}
		}
		return pending == 0 && counts[store.StatusAcked] >= total
	})
	e.logf("%s: drained in %s", engine, time.Since(t0).Round(time.Millisecond))
	stop()
	wg.Wait()

	// No two leases of a delivery overlap.
	var overlaps []string
	multi := 0
	for id, ls := range leases {
		sort.Slice(ls, func(i, j int) bool { return ls[i].start.Before(ls[j].start) })
		if len(ls) > 1 {
			multi++
		}
		for i := 1; i < len(ls); i++ {
			if ls[i].start.Before(ls[i-1].end) {
				overlaps = append(overlaps, fmt.Sprintf("%s: claimer %d attempt %d [%s, %s) and claimer %d attempt %d from %s",
					id, ls[i-1].claimer, ls[i-1].attempt, ls[i-1].start.Format("15:04:05.000"), ls[i-1].end.Format("15:04:05.000"),
					ls[i].claimer, ls[i].attempt, ls[i].start.Format("15:04:05.000")))
			}
		}
	}
	// Every delivery acked, and its attempts are exactly the leases seen.
	all, err := listAll(ctx, stores[0], hostID)
	if err != nil {
		r.failf("%s: list: %v", engine, err)
		return
	}
	var notAcked, attemptsOff []string
	for _, d := range all {
		if d.Status != store.StatusAcked {
			notAcked = append(notAcked, fmt.Sprintf("%s (%s)", d.ID, d.Status))
		}
		if d.Attempts != len(leases[d.ID]) {
			attemptsOff = append(attemptsOff, fmt.Sprintf("%s (%d attempts, %d leases seen)", d.ID, d.Attempts, len(leases[d.ID])))
		}
	}
	nLeases := 0
	for _, ls := range leases {
		nLeases += len(ls)
	}
	r.figuref("%s: %d inserted, %d leases by %d claimers (%d deliveries leased more than once), %d acks, %d nacks, %d abandoned",
		engine, len(all), nLeases, claimers, multi, acks.Load(), nacks.Load(), dropped.Load())
	if n := errs.Load(); n > 0 {
		r.figuref("%s: %d store errors (last: %v)", engine, n, lastErr.Load())
	}
	if len(all) != total {
		r.failf("%s: %d inserts succeeded but %d deliveries stored", engine, total, len(all))
	}
	if settled != nil {
		r.failf("%s: %v", engine, settled)
	}
	report := func(kind string, items []string) {
		if len(items) == 0 {
			return
		}
		sort.Strings(items)
		shown := items[:min(len(items), 10)]
		r.failf("%s: %s (%d): %s", engine, kind, len(items), strings.Join(shown, "; "))
	}
	report("LEASED TWICE while a lease was valid", overlaps)
	report("not acked", notAcked)
	report("attempts differ from the leases handed out", attemptsOff)
}

// listAll lists every delivery of a host, following the keyset cursor.
func listAll(ctx context.Context, st store.Store, hostID string) ([]*store.Delivery, error) {
	var all []*store.Delivery
	p := &store.DeliveryListParams{HostID: hostID, Limit: 500}
	for {
		page, err := st.DeliveryList(ctx, p)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < p.Limit {
			return all, nil
		}
		last := page[len(page)-1]
		p.BeforeReceivedAt, p.BeforeID = &last.ReceivedAt, last.ID
	}
}
