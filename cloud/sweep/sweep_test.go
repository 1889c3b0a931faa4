package sweep

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

func setup(t *testing.T) (store.Store, *clockwork.FakeClock, *Sweeper) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	t.Cleanup(func() { st.Close() })
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	now := clock.Now()
	_, err = st.HostCreate(ctx, &store.HostCreateParams{ID: "h1", Name: "h1", ClaimCodeHash: []byte("c"), ClaimExpiresAt: now.Add(time.Hour), Now: now})
	require.NoError(t, err)
	_, err = st.DeliveryInsert(ctx, &store.DeliveryInsertParams{
		ID: "github:e1:1", HostID: "h1", Source: "github", EventID: "e1", RawBody: []byte("{}"),
		Headers: map[string]string{}, MaxAttempts: 5, ReceivedAt: now,
	})
	require.NoError(t, err)
	leased, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h1", Max: 10, MaxBytes: 1 << 20, LeaseFor: 30 * time.Second, Now: now})
	require.NoError(t, err)
	require.Len(t, leased.Deliveries, 1)
	sw := &Sweeper{Store: st, Clock: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Interval: time.Second, Policy: store.DefaultRetryPolicy}
	return st, clock, sw
}

func TestSweepOnceExpiresOnlyEndedLeases(t *testing.T) {
	st, clock, sw := setup(t)
	ctx := context.Background()
	clock.Advance(29 * time.Second)
	require.Equal(t, 0, sw.SweepOnce(ctx), "lease still valid")
	clock.Advance(2 * time.Second)
	require.Equal(t, 1, sw.SweepOnce(ctx))
	d, err := st.DeliveryGet(ctx, "h1", "github:e1:1")
	require.NoError(t, err)
	require.Equal(t, store.StatusRetrying, d.Status)
	require.Equal(t, clock.Now().Truncate(time.Millisecond).Add(30*time.Second), d.NextRetryAt.UTC())
	require.Equal(t, 0, sw.SweepOnce(ctx), "nothing left")
}

func TestRunTicksOnTheClockAndStops(t *testing.T) {
	st, clock, sw := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sw.Run(ctx) }()

	clock.Advance(31 * time.Second) // past the lease, before the first tick fires
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Second)
	require.Eventually(t, func() bool {
		d, err := st.DeliveryGet(context.Background(), "h1", "github:e1:1")
		return err == nil && d.Status == store.StatusRetrying
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}
