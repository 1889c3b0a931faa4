package alert_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
)

// countingStore counts the evaluator's store calls by method.
type countingStore struct {
	alert.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *countingStore) count(m string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[m]++
}

func (c *countingStore) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *countingStore) HostNames(ctx context.Context, ids []string) (map[string]string, error) {
	c.count("HostNames")
	return c.Store.HostNames(ctx, ids)
}
func (c *countingStore) QuarantineCount(ctx context.Context) (int, error) {
	c.count("QuarantineCount")
	return c.Store.QuarantineCount(ctx)
}
func (c *countingStore) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error) {
	c.count("LeaseAcquire")
	return c.Store.LeaseAcquire(ctx, p)
}
func (c *countingStore) PresenceChanges(ctx context.Context, p *store.PresenceChangesParams) ([]*store.PresenceChange, error) {
	c.count("PresenceChanges")
	return c.Store.PresenceChanges(ctx, p)
}
func (c *countingStore) PresenceSet(ctx context.Context, p *store.PresenceSetParams) ([]bool, error) {
	c.count("PresenceSet")
	return c.Store.PresenceSet(ctx, p)
}
func (c *countingStore) PresenceList(ctx context.Context, p *store.PresenceListParams) ([]*store.PresenceChange, error) {
	c.count("PresenceList")
	return c.Store.PresenceList(ctx, p)
}
func (c *countingStore) PresenceCounts(ctx context.Context) (map[store.Presence]int, error) {
	c.count("PresenceCounts")
	return c.Store.PresenceCounts(ctx)
}
func (c *countingStore) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	c.count("BacklogByHost")
	return c.Store.BacklogByHost(ctx, p)
}
func (c *countingStore) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	c.count("FailingSources")
	return c.Store.FailingSources(ctx, p)
}
func (c *countingStore) AlertFire(ctx context.Context, ps []*store.AlertFireParams) ([]*store.Alert, error) {
	c.count("AlertFire")
	return c.Store.AlertFire(ctx, ps)
}
func (c *countingStore) AlertRemind(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error) {
	c.count("AlertRemind")
	return c.Store.AlertRemind(ctx, ps)
}
func (c *countingStore) AlertResolve(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error) {
	c.count("AlertResolve")
	return c.Store.AlertResolve(ctx, ps)
}
func (c *countingStore) AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error) {
	c.count("AlertList")
	return c.Store.AlertList(ctx, p)
}
func (c *countingStore) AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error) {
	c.count("AlertRuleList")
	return c.Store.AlertRuleList(ctx)
}
func (c *countingStore) AlertOutboxDue(ctx context.Context, p *store.AlertOutboxDueParams) ([]*store.AlertNotification, error) {
	c.count("AlertOutboxDue")
	return c.Store.AlertOutboxDue(ctx, p)
}
func (c *countingStore) Intake5xxSum(ctx context.Context, p *store.Intake5xxSumParams) (int64, error) {
	c.count("Intake5xxSum")
	return c.Store.Intake5xxSum(ctx, p)
}

// fleet creates n claimed hosts, every other one with a webhook waiting
// since base, and heartbeats them all at base.
func fleet(t testing.TB, st store.Store, n int) {
	ctx := context.Background()
	var batch []*store.DeliveryInsertParams
	for i := range n {
		id := fmt.Sprintf("h_%05d", i)
		claimedHost(t, st, id, "host "+id)
		require.NoError(t, st.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: id, Now: base}))
		if i%2 == 0 {
			batch = append(batch, &store.DeliveryInsertParams{ID: "github:" + id, HostID: id, Source: "github", EventID: id,
				Headers: map[string]string{}, RawBody: []byte(`{}`), ReceivedAt: base})
		}
		if len(batch) == 500 || (i == n-1 && len(batch) > 0) {
			_, err := st.DeliveryInsertBatch(ctx, batch)
			require.NoError(t, err)
			batch = nil
		}
	}
}

// reads are the queries an evaluation makes that do not change anything.
var reads = []string{"AlertRuleList", "PresenceChanges", "PresenceList", "PresenceCounts", "BacklogByHost", "FailingSources", "QuarantineCount", "Intake5xxSum", "AlertList", "AlertOutboxDue"}

func readsOf(n map[string]int) map[string]int {
	out := map[string]int{}
	for _, m := range reads {
		out[m] = n[m]
	}
	return out
}

// An evaluation reads with one bounded query per rule whatever the number
// of hosts; writes follow transitions (at most MaxHosts presence changes
// an interval), not hosts.
func TestEvaluationCostBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,500 hosts")
	}
	ctx := context.Background()
	counted := func(n int) map[string]int {
		st := openSQLite(t)
		fleet(t, st, n)
		// Every host stays online, so presence settles; none alerts but
		// through the rules' reads.
		cs := &countingStore{Store: st, n: map[string]int{}}
		clock := clockwork.NewFakeClockAt(base)
		e := alert.New(cs, newRing(t), evalConfig(alert.Config{}), clock, slog.New(slog.DiscardHandler))
		// The first records up to MaxHosts presences, in one call.
		e.Tick(ctx)
		require.Equal(t, 1, cs.take()["PresenceSet"], "%d hosts' first presences", n)
		counts, err := st.PresenceCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[store.Presence]int{store.PresenceOnline: min(n, alert.MaxHosts)}, counts)
		for range 2 {
			clock.Advance(10 * time.Second)
			e.Tick(ctx)
		}
		clock.Advance(10 * time.Second)
		cs.take()
		e.Tick(ctx)
		return cs.take()
	}
	small, large := counted(10), counted(alert.MaxHosts+500)
	require.Equal(t, readsOf(small), readsOf(large), "the same reads for 10 and 1,500 hosts")
	for _, m := range reads {
		require.LessOrEqual(t, small[m], 1, m)
	}
	require.Zero(t, large["PresenceSet"], "no presence changed")
}

// BenchmarkEvaluate10kHosts evaluates the rules over 10,000 hosts, half
// of them with a webhook waiting, and reports the store calls of one
// evaluation by method.
func BenchmarkEvaluate10kHosts(b *testing.B) {
	ctx := context.Background()
	st := openSQLite(b)
	fleet(b, st, 10_000)
	cs := &countingStore{Store: st, n: map[string]int{}}
	clock := clockwork.NewFakeClockAt(base)
	e := alert.New(cs, newRing(b), evalConfig(alert.Config{}), clock, slog.New(slog.DiscardHandler))
	for range 12 { // presence recorded, 1,000 hosts an interval
		e.Tick(ctx)
		clock.Advance(10 * time.Second)
	}
	// Past the oldest-pending threshold: 5,000 hosts' webhooks are old,
	// and their alerts fire (writes follow transitions).
	clock.Advance(15 * time.Minute)
	for range 10 {
		e.Tick(ctx)
		clock.Advance(10 * time.Second)
	}
	cs.take()
	b.ResetTimer()
	for b.Loop() {
		e.Tick(ctx)
		clock.Advance(10 * time.Second)
	}
	b.StopTimer()
	n := cs.take()
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s=%.1f", m, float64(n[m])/float64(b.N)))
		if slices.Contains(reads, m) {
			b.ReportMetric(float64(n[m])/float64(b.N), m+"/eval")
		}
	}
	b.Logf("store calls per evaluation: %s", strings.Join(parts, " "))
}

// BenchmarkFleetGoesQuiet times the evaluation that finds a fleet of
// MaxHosts hosts gone quiet at once, an hour after their last heartbeat
// (the first after the cloud comes back to a store whose hosts are away,
// or a partition between them and the cloud): it records every host's
// presence and fires their alerts ("quiet"); then the one after every
// host heartbeats again, which records their presence and resolves those
// alerts ("back"). On each engine, each evaluation on a new store; it logs
// the store calls by method.
//
//	go test -run '^$' -bench FleetGoesQuiet -benchtime 5x ./cloud/alert/
func BenchmarkFleetGoesQuiet(b *testing.B) {
	ctx := context.Background()
	engines := map[string]func(b *testing.B) store.Store{
		"sqlite": func(b *testing.B) store.Store { return openSQLite(b) },
		"postgres": func(b *testing.B) store.Store {
			st, err := postgres.Open(ctx, pgtest.NewDatabase(b))
			require.NoError(b, err)
			b.Cleanup(func() { st.Close() })
			require.NoError(b, st.Migrate(ctx))
			return st
		},
	}
	for _, engine := range []string{"sqlite", "postgres"} {
		for _, phase := range []string{"quiet", "back"} {
			b.Run(engine+"/"+phase, func(b *testing.B) {
				calls := map[string]int{}
				for range b.N {
					b.StopTimer()
					st := engines[engine](b)
					fleet(b, st, alert.MaxHosts)
					cs := &countingStore{Store: st, n: map[string]int{}}
					clock := clockwork.NewFakeClockAt(base.Add(time.Hour))
					e := alert.New(cs, newRing(b), evalConfig(alert.Config{}), clock, slog.New(slog.DiscardHandler))
					if phase == "back" {
						e.Tick(ctx)
						clock.Advance(10 * time.Second)
						for i := range alert.MaxHosts {
							require.NoError(b, st.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: fmt.Sprintf("h_%05d", i), Now: clock.Now()}))
						}
						cs.take()
					}
					b.StartTimer()
					e.Tick(ctx)
					b.StopTimer()
					for m, n := range cs.take() {
						calls[m] += n
					}
					want := store.PresenceOffline
					if phase == "back" {
						want = store.PresenceOnline
					}
					counts, err := st.PresenceCounts(ctx)
					require.NoError(b, err)
					require.Equal(b, map[store.Presence]int{want: alert.MaxHosts}, counts)
				}
				var parts []string
				for _, m := range slices.Sorted(maps.Keys(calls)) {
					parts = append(parts, fmt.Sprintf("%s=%.0f", m, float64(calls[m])/float64(b.N)))
				}
				b.Logf("store calls per evaluation: %s", strings.Join(parts, " "))
			})
		}
	}
}
