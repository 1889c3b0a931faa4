package alert_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
)

// Two replicas on one Postgres evaluate at once: one holds the lease,
// and every transition is notified once; when it stops, the other takes
// over after the lease ends and carries on from the same state.
func TestReplicasNotifyOnce(t *testing.T) {
	pgtest.ServerURL(t)
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	open := func() store.Store {
		st, err := postgres.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA := open()
	require.NoError(t, stA.Migrate(ctx))
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
