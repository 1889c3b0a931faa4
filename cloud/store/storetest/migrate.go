package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// Migration is what MigrateBodies needs of an engine's migrations.
type Migration struct {
	// Down undoes the migration that moved bodies out of the deliveries
	// row; Up applies it again.
	Down, Up func(ctx context.Context) error
	// InlineBody reads a delivery's body from its deliveries row, as it is
	// stored before that migration.
	InlineBody func(ctx context.Context, deliveryID string) ([]byte, error)
}

// GooseMigration is the Migration that p, an engine's goose provider of
// its migrations, undoes down to version downTo and applies again up to
// the newest.
func GooseMigration(p *goose.Provider, downTo int64) Migration {
	return Migration{
		Down: func(ctx context.Context) error { _, err := p.DownTo(ctx, downTo); return err },
		Up:   func(ctx context.Context) error { _, err := p.Up(ctx); return err },
	}
}

// MigrateBodies holds the migration that moved webhook bodies into a table of
// their own to its data: a stored body goes back into the row when the
// migration is undone, and out again, unchanged, when it is reapplied.
func MigrateBodies(ctx context.Context, t *testing.T, s store.Store, m Migration) {
	t.Helper()
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: "h-migrate", Name: "migrate", Now: now})
	require.NoError(t, err)
	bodies := map[string][]byte{
		"github:a:1": []byte(`{"action":"opened","number":1}`),
		"github:b:1": {0x00, 0xff, 0x7b, 0x0a}, // not JSON, not UTF-8: bytes as sent
		"github:c:1": {},
	}
	for id, body := range bodies {
		_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: id, HostID: "h-migrate", Source: "github",
			EventID: id, Headers: map[string]string{"x-github-event": "issues"}, RawBody: body, ReceivedAt: now})
		require.NoError(t, err)
	}

	require.NoError(t, m.Down(ctx))
	for id, body := range bodies {
		got, err := m.InlineBody(ctx, id)
		require.NoError(t, err)
		require.Equal(t, body, orEmpty(got), "%s back in its row", id)
	}

	require.NoError(t, m.Up(ctx))
	for id, body := range bodies {
		d, err := s.DeliveryGet(ctx, "h-migrate", id)
		require.NoError(t, err)
		require.Equal(t, body, d.RawBody, "%s after the migration", id)
	}
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// DeletesLeaveNothing holds an engine's delete path to the tables beside
// deliveries: after a prune and a DLQ purge, no body, audit event or result
// is left without its delivery. count returns how many rows a table holds for the
// given delivery ids.
func DeletesLeaveNothing(ctx context.Context, t *testing.T, s store.Store, count func(ctx context.Context, table string, ids []string) (int, error)) {
	t.Helper()
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: "h-delete", Name: "delete", Now: base})
	require.NoError(t, err)
	acked := insert(ctx, t, s, "h-delete", "evt-acked", base, deliveryOpts{})
	require.Len(t, lease(ctx, t, s, "h-delete", 1, 0, base), 1)
	require.Equal(t, 1, ack(ctx, t, s, "h-delete", base, acked.ID))
	dead := toDLQ(ctx, t, s, "h-delete", "evt-dead", base)
	kept := insert(ctx, t, s, "h-delete", "evt-kept", base, deliveryOpts{})
	_, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: "h-delete", Results: []store.DeliveryResult{
		{DeliveryID: acked.ID, Attempt: 1, Result: "success", ReportedAt: base}}})
	require.NoError(t, err)
	_, err = s.DeliveryResultGet(ctx, acked.ID)
	require.NoError(t, err)
	// A fanout of two members, its one body shared, both acked.
	_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h-delete-2", Name: "delete 2", Now: base})
	require.NoError(t, err)
	_, err = s.GroupCreate(ctx, &store.GroupCreateParams{ID: "g-delete", Name: "delete", Now: base})
	require.NoError(t, err)
	share := &store.BodyShare{}
	var fanned []string
	var ps []*store.DeliveryInsertParams
	for _, m := range []string{"h-delete", "h-delete-2"} {
		p := insertParams(m, "evt-fanned", base, deliveryOpts{})
		p.GroupID, p.Lane, p.Share = "g-delete", m, share
		p.ID = store.LaneDeliveryID(p.Source, p.EventID, m, base)
		ps, fanned = append(ps, p), append(fanned, p.ID)
	}
	_, err = s.DeliveryInsertBatch(ctx, ps)
	require.NoError(t, err)
	for i, m := range []string{"h-delete", "h-delete-2"} {
		require.Contains(t, ids(lease(ctx, t, s, m, 10, 0, base)), fanned[i])
		require.Equal(t, 1, ack(ctx, t, s, m, base, fanned[i]))
	}
	gone := append([]string{acked.ID, dead.ID}, fanned...)
	for _, table := range []string{"delivery_bodies", "delivery_events"} {
		n, err := count(ctx, table, gone)
		require.NoError(t, err)
		require.Positive(t, n, "%s holds rows of the deliveries to delete", table)
	}

	n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked, PruneParams: store.PruneParams{Before: base.Add(time.Hour)}})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = s.DeliveryPurgeDLQ(ctx, &store.DeliveryPurgeDLQParams{HostID: "h-delete"})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, err = s.DeliveryResultGet(ctx, acked.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the result of a deleted delivery")
	for _, table := range []string{"delivery_bodies", "delivery_events"} {
		n, err := count(ctx, table, gone)
		require.NoError(t, err)
		require.Zero(t, n, "%s rows of deleted deliveries", table)
		n, err = count(ctx, table, []string{kept.ID})
		require.NoError(t, err)
		require.Positive(t, n, "%s rows of the delivery kept", table)
	}
}

// MigrateQuarantine holds the migration that gave the quarantine its size
// and token_macs columns to its data: a quarantined request survives it
// undone and reapplied, and then counts its bytes against the bound.
func MigrateQuarantine(ctx context.Context, t *testing.T, s store.Store, m Migration) {
	t.Helper()
	q := store.QuarantinedRequest{HostID: "h-migrate", Source: "github", URL: "https://relay.example/x",
		Header: map[string][]string{"X-Hub-Signature-256": {"sha256=00"}}, Body: []byte{0x00, 0xff, 0x7b},
		ClientIP: "198.51.100.1", ReceivedAt: base}
	_, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q})
	require.NoError(t, err)

	require.NoError(t, m.Down(ctx))
	require.NoError(t, m.Up(ctx))
	list, err := s.QuarantineList(ctx, &store.QuarantineListParams{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, q.Body, list[0].Body)
	require.Equal(t, q.Header, list[0].Header)
	require.Empty(t, list[0].TokenMACs)

	// The row's size was computed by the migration: about 60 bytes.
	_, err = s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q, MaxBytes: 100})
	require.ErrorIs(t, err, store.ErrQuarantineFull, "the migrated row's bytes count")
	_, err = s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q, MaxBytes: 200})
	require.NoError(t, err)
}

// TimeMigrations times the newest migrations on a populated store, as an
// upgrade meets them: p, the engine's goose provider of a store holding n
// deliveries, takes it down to version downTo, then up again one
// migration at a time, each timed and reported (s/vN) and logged.
func TimeMigrations(b *testing.B, p *goose.Provider, downTo int64, n int) {
	ctx := context.Background()
	_, err := p.DownTo(ctx, downTo)
	require.NoError(b, err)
	for b.Loop() {
		for {
			t := time.Now()
			res, err := p.UpByOne(ctx)
			if errors.Is(err, goose.ErrNoNextVersion) {
				break
			}
			require.NoError(b, err)
			took := time.Since(t)
			b.ReportMetric(took.Seconds(), fmt.Sprintf("s/v%d", res.Source.Version))
			b.Logf("migration %d (%s) on %d deliveries: %s", res.Source.Version, filepath.Base(res.Source.Path), n, took.Round(time.Millisecond))
		}
	}
}

// BenchDeliveries is how many deliveries a benchmark of reads or
// migrations stores: RELAY_BENCH_DELIVERIES, rounded down to a multiple of
// 5,000 (the plan tests' fills store that many at a time), or def.
func BenchDeliveries(def int) int {
	if v, err := strconv.Atoi(os.Getenv("RELAY_BENCH_DELIVERIES")); err == nil && v > 0 {
		return v / 5000 * 5000
	}
	return def
}
