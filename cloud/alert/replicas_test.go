package alert_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
)

// replicaStores is a migrated store on a new Postgres database, and open,
// which opens another on the same database (another replica's).
func replicaStores(t *testing.T) (store.Store, func() store.Store) {
	t.Helper()
	pgtest.ServerURL(t)
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	open := func() store.Store {
		st, err := postgres.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	st := open()
	require.NoError(t, st.Migrate(ctx))
	return st, open
}

// Two replicas on one Postgres evaluate at once: one holds the lease,
// and every transition is notified once; when it stops, the other takes
// over after the lease ends and carries on from the same state.
func TestReplicasNotifyOnce(t *testing.T) {
	ctx := context.Background()
	stA, open := replicaStores(t)
	e := newEnv(t, stA, alert.Config{Holder: "a"})
	require.NoError(t, stA.AlertRuleSet(ctx, &store.AlertRuleSetting{Rule: alert.RuleOldestPending, Disabled: true}))
	clockB := clockwork.NewFakeClockAt(base)
	b := alert.New(open(), e.ring, evalConfig(alert.Config{Holder: "b"}), clockB, slog.New(slog.DiscardHandler))
	tick := func(d time.Duration, both bool) {
		e.clock.Advance(base.Add(d).Sub(e.clock.Now()))
		clockB.Advance(base.Add(d).Sub(clockB.Now()))
		done := make(chan struct{})
		if both {
			go func() { defer close(done); b.Tick(ctx) }()
		} else {
			close(done)
		}
		e.eval.Tick(ctx)
		<-done
	}
	e.beat(t, 0)
	e.receive(t, "a", 0)
	for d := time.Duration(0); d <= 5*time.Minute; d += 5 * time.Second {
		tick(d, true)
	}
	require.Equal(t, []string{"alert.firing host_offline_with_work"}, e.sink.types(t))
	require.Equal(t, 1.0, gauge(t, e.eval.Metrics(), "relay_alert_evaluator")+gauge(t, b.Metrics(), "relay_alert_evaluator"), "one evaluator")

	// A stops; B takes the lease once it ends and resolves what A fired.
	e.beat(t, 6*time.Minute)
	clockB.Advance(base.Add(6*time.Minute + time.Second).Sub(clockB.Now()))
	b.Tick(ctx)
	for d := 6*time.Minute + time.Second; d <= 7*time.Minute; d += 5 * time.Second {
		clockB.Advance(base.Add(d).Sub(clockB.Now()))
		b.Tick(ctx)
	}
	require.Equal(t, []string{"alert.firing host_offline_with_work", "alert.resolved host_offline_with_work"}, e.sink.types(t))
}

// Two replicas on one Postgres: the 5xx of the one that does not evaluate
// reach the evaluator through the store, fire the alert once, and it
// resolves once they are past its window.
func TestReplicasIntake5xx(t *testing.T) {
	ctx := context.Background()
	stA, open := replicaStores(t)
	none := func() uint64 { return 0 }
	e := newEnv(t, stA, alert.Config{Holder: "a", Intake5xx: none})
	var fivexx atomic.Uint64
	clockB := clockwork.NewFakeClockAt(base)
	b := alert.New(open(), e.ring, evalConfig(alert.Config{Holder: "b", Intake5xx: fivexx.Load}), clockB, slog.New(slog.DiscardHandler))
	// B ticks first (and writes its count), then A evaluates.
	tick := func(d time.Duration) {
		clockB.Advance(base.Add(d).Sub(clockB.Now()))
		b.Tick(ctx)
		e.at(d)
	}
	e.beat(t, 0)
	e.at(0) // A takes the lease
	tick(0)
	fivexx.Add(3)
	tick(10 * time.Second)
	require.Equal(t, []string{"alert.firing intake_5xx"}, e.sink.types(t))
	require.Contains(t, e.sink.notifications(t)[0].Data.Summary, "intake answered 3 requests with 5xx")
	require.Equal(t, 1.0, gauge(t, e.eval.Metrics(), "relay_alert_evaluator"))
	require.Equal(t, 0.0, gauge(t, b.Metrics(), "relay_alert_evaluator"), "B does not evaluate")
	for d := 20 * time.Second; d <= 3*time.Minute; d += 10 * time.Second {
		e.beat(t, d)
		tick(d)
	}
	require.Equal(t, []string{"alert.firing intake_5xx", "alert.resolved intake_5xx"}, e.sink.types(t))
}
