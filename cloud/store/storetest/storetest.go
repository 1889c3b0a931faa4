// Package storetest is the one conformance suite every store engine passes:
// each engine's tests call Exercise with a constructor of fresh, migrated
// stores. Time is driven only through params (a fixed base time plus
// offsets); nothing sleeps.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// base is the suite's fixed "now". Offsets from it drive every clock.
var base = time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)

const leaseFor = 5 * time.Minute

// testBundle is what setup gives each test besides the store.
type testBundle struct {
	host  *store.Host // active, with a pending claim code
	other *store.Host // another active host
}

// Exercise runs the suite. newStore must return a fresh, migrated store for
// t alone and close it at t.Cleanup. Subtests run in parallel.
func Exercise(ctx context.Context, t *testing.T, newStore func(t *testing.T) store.Store) {
	setup := func(t *testing.T) (store.Store, *testBundle) {
		t.Helper()
		s := newStore(t)
		return s, &testBundle{
			host:  createHost(ctx, t, s, "host-a", base),
			other: createHost(ctx, t, s, "host-b", base),
		}
	}

	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		require.NoError(t, s.Migrate(ctx), "re-running migrate is a no-op")
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Ping(ctx))
		got, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host, got, "data survives a re-run")
	})

	exerciseHosts(ctx, t, setup)
	exerciseSources(ctx, t, setup)
	exerciseDeliveries(ctx, t, setup)
	exerciseLease(ctx, t, setup)
	exerciseAckNack(ctx, t, setup)
	exerciseReleaseUnheld(ctx, t, setup)
	exerciseReport(ctx, t, setup)
	exerciseExpiry(ctx, t, setup)
	exerciseAudit(ctx, t, setup)
	exerciseConcurrency(ctx, t, setup)
	exerciseManage(ctx, t, setup)
	exerciseEdge(ctx, t, setup)
	exerciseReplayGuard(ctx, t, setup)
	exerciseStaleNack(ctx, t, setup)
	exerciseInsertRace(ctx, t, setup)
	exerciseBatch(ctx, t, setup)
	exerciseInsertLeased(ctx, t, setup)
	exerciseReplay(ctx, t, setup)
	exerciseChanged(ctx, t, setup)
	exerciseInspect(ctx, t, setup)
	exerciseAlerts(ctx, t, setup)
	exerciseConsole(ctx, t, setup)
	exerciseVolume(ctx, t, setup)
	exerciseIPSets(ctx, t, setup)
	exerciseGroups(ctx, t, setup)
	exerciseGroupDeliveries(ctx, t, setup)
}

type setupFunc func(t *testing.T) (store.Store, *testBundle)
