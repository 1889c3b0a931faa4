package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// eventsOf inserts n deliveries of host, leases them all and acks the
// first: each has a trail of one to three audit events.
func eventsOf(ctx context.Context, t *testing.T, s *Store, host string, n int, now time.Time) []string {
	t.Helper()
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: host, Name: host, Now: now})
	require.NoError(t, err)
	var ids []string
	for i := range n {
		ev := fmt.Sprintf("%s-%d", host, i)
		at := now.Add(time.Duration(i) * time.Millisecond)
		_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: store.DeliveryID("github", ev, at), HostID: host,
			Source: "github", EventID: ev, RawBody: []byte(ev), ReceivedAt: at, Headers: map[string]string{}})
		require.NoError(t, err)
		ids = append(ids, store.DeliveryID("github", ev, at))
	}
	res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: host, Max: n - 1, LeaseFor: time.Minute, Now: now})
	require.NoError(t, err)
	require.Len(t, res.Deliveries, n-1)
	acked, err := s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: host, IDs: ids[:1], Now: now})
	require.NoError(t, err)
	require.Equal(t, 1, acked)
	return ids
}

// trailed is a migrated store with n deliveries of host h-a (see
// eventsOf), received from the time it returns, and their ids.
func trailed(ctx context.Context, t *testing.T, n int) (*Store, time.Time, []string) {
	t.Helper()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	return s, now, eventsOf(ctx, t, s, "h-a", n, now)
}

func trails(ctx context.Context, t *testing.T, s *Store, ids []string) map[string][]*store.DeliveryEvent {
	t.Helper()
	out := map[string][]*store.DeliveryEvent{}
	for _, id := range ids {
		evs, err := s.DeliveryEventList(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, evs, id)
		out[id] = evs
	}
	return out
}

// The audit trail keyed by received time (migration 12) keeps every event,
// its id and its delivery in both directions; ids go on from the old
// sequence, never reusing one of a deleted event; a delivery's events are
// found through the index and go with it.
func TestMigrateEventKeys(t *testing.T) {
	ctx := context.Background()
	s, now, ids := trailed(ctx, t, 5)
	gone := eventsOf(ctx, t, s, "h-gone", 2, now)
	before := trails(ctx, t, s, ids)
	var last int64
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT max(id) FROM delivery_events`).Scan(&last))
	// The newest events go with their host: the next id is still past them.
	_, err := s.write.ExecContext(ctx, `DELETE FROM hosts WHERE id = 'h-gone'`)
	require.NoError(t, err)
	for _, id := range gone {
		evs, err := s.DeliveryEventList(ctx, id)
		require.NoError(t, err)
		require.Empty(t, evs, "events of %s, deleted by its host's cascade", id)
	}

	p := migrator(t, s)
	_, err = p.DownTo(ctx, 10)
	require.NoError(t, err)
	var n int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_events WHERE delivery_id = ?`, ids[0]).Scan(&n))
	require.Equal(t, len(before[ids[0]]), n, "events back under the foreign key")
	// Today's insert also writes the body digest (migration 21): the old
	// layout gets that column alone, which migration 16's rebuild leaves
	// behind and 21 adds back (22's rebuild keeps them).
	_, err = s.write.ExecContext(ctx, `ALTER TABLE deliveries ADD COLUMN body_sha256 BLOB`)
	require.NoError(t, err)
	// And a group's id and lane (migration 22), empty for a host's own.
	for _, col := range []string{"group_id", "lane"} {
		_, err = s.write.ExecContext(ctx, `ALTER TABLE deliveries ADD COLUMN `+col+` TEXT NOT NULL DEFAULT ''`)
		require.NoError(t, err)
	}
	// And a body's codec, its column renamed (migration 29): these bodies
	// are small, stored as received, so both go back before migration 29.
	for _, change := range []string{`RENAME COLUMN raw_body TO body`, `ADD COLUMN codec INTEGER NOT NULL DEFAULT 0`} {
		_, err = s.write.ExecContext(ctx, `ALTER TABLE delivery_bodies `+change)
		require.NoError(t, err)
	}
	// And the events' host and source (migration 31).
	for _, col := range []string{"host_id", "source"} {
		_, err = s.write.ExecContext(ctx, `ALTER TABLE delivery_events ADD COLUMN `+col+` TEXT`)
		require.NoError(t, err)
	}
	eventsOf(ctx, t, s, "h-between", 2, now) // written in the old layout
	for _, change := range []string{`DROP COLUMN codec`, `RENAME COLUMN body TO raw_body`} {
		_, err = s.write.ExecContext(ctx, `ALTER TABLE delivery_bodies `+change)
		require.NoError(t, err)
	}
	for _, col := range []string{"source", "host_id"} {
		_, err = s.write.ExecContext(ctx, `ALTER TABLE delivery_events DROP COLUMN `+col)
		require.NoError(t, err)
	}
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT max(id) FROM delivery_events`).Scan(&last))

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, before, trails(ctx, t, s, ids))
	later := eventsOf(ctx, t, s, "h-b", 2, now.Add(time.Hour))
	after := trails(ctx, t, s, later)
	require.Greater(t, after[later[0]][0].ID, last)

	// Deleting a delivery deletes its events, and no one else's.
	n, err = s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked,
		PruneParams: store.PruneParams{Before: now.Add(2 * time.Hour)}})
	require.NoError(t, err)
	require.Equal(t, 3, n, "one acked delivery of each host")
	evs, err := s.DeliveryEventList(ctx, ids[0])
	require.NoError(t, err)
	require.Empty(t, evs)
	delete(before, ids[0])
	require.Equal(t, before, trails(ctx, t, s, ids[1:]))
}

// A delivery's audit trail is read through the index led by its received
// millisecond.
func TestEventListUsesIndex(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	plan := strings.Join(queryPlan(ctx, t, s, `SELECT id, at, reason FROM delivery_events WHERE `+idKey+` ORDER BY id`,
		"github:x:1764230400000", "github:x:1764230400000"), "; ")
	require.Contains(t, plan, "SEARCH delivery_events USING INDEX delivery_events_received_idx (<expr>=? AND delivery_id=?)")
	require.NotContains(t, plan, "TEMP B-TREE")
	// An event recorded apart from the intake finds its delivery's host
	// and source by the delivery's key.
	plan = strings.Join(queryPlan(ctx, t, s, recordEvent, "github:x:1764230400000", 0, "queued", "retrying", "r", 1), "; ")
	require.Contains(t, plan, "SEARCH d USING INDEX deliveries_key_idx (<expr>=? AND delivery_id=?)")
}

// A batch's "received" events go in statements of several rows: each new
// delivery of a batch longer than one such statement (and its remainder)
// gets exactly its event, in the order they were inserted.
func TestBatchRecordsEachReceived(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: "h", Name: "h", Now: now})
	require.NoError(t, err)
	n := 2*eventsPerInsert + 5
	var ps []*store.DeliveryInsertParams
	for i := range n {
		ev := fmt.Sprintf("ev-%02d", i)
		ps = append(ps, &store.DeliveryInsertParams{ID: store.DeliveryID("github", ev, now), HostID: "h",
			Source: "github", EventID: ev, RawBody: []byte(ev), ReceivedAt: now, Headers: map[string]string{}})
	}
	ps = append(ps, ps[3]) // a repeat within the batch: no event of its own
	res, err := s.DeliveryInsertBatch(ctx, ps)
	require.NoError(t, err)
	require.Equal(t, store.InsertDuplicate, res[n].Outcome)
	var last int64
	for i := range n {
		evs, err := s.DeliveryEventList(ctx, res[i].Delivery.ID)
		require.NoError(t, err)
		require.Len(t, evs, 1, "delivery %d", i)
		require.Equal(t, store.TransitionReceive.To, evs[0].To)
		require.Greater(t, evs[0].ID, last, "in insert order (by key: here, the batch order)")
		last = evs[0].ID
	}
	var total int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_events`).Scan(&total))
	require.Equal(t, n, total)
}
