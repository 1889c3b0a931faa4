package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// exerciseReplay: a delivery stored as a replay of another (ReplayOf) notes
// itself in the other's audit trail, in the same transaction, leaving its
// status as it is; a repeat of the replay notes nothing, and a replay
// whose original is gone is stored all the same.
func exerciseReplay(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ReplayNotesTheOriginal", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		orig := insert(ctx, t, s, b.host.ID, "evt-orig", base, deliveryOpts{})
		lease(ctx, t, s, b.host.ID, 10, 0, base)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base, orig.ID))
		before := events(ctx, t, s, orig.ID)

		at := base.Add(time.Hour)
		replay := func(hostID, eventID string, at time.Time, of *store.ReplayOf) *store.DeliveryInsertResult {
			p := insertParams(hostID, eventID, at, deliveryOpts{})
			p.ReplayOf = of
			res, err := s.DeliveryInsert(ctx, p)
			require.NoError(t, err)
			return res
		}
		of := &store.ReplayOf{HostID: b.host.ID, ID: orig.ID, Note: "replayed as r-1"}
		r1 := replay(b.other.ID, "evt-orig~replay-1", at, of)
		require.Equal(t, store.InsertQueued, r1.Outcome)
		require.Equal(t, store.StatusQueued, r1.Delivery.Status)
		after := events(ctx, t, s, orig.ID)
		require.Len(t, after, len(before)+1)
		note := after[len(after)-1]
		require.Equal(t, store.StatusAcked, note.From)
		require.Equal(t, store.StatusAcked, note.To, "the original's status is unchanged")
		require.Equal(t, "replayed as r-1", note.Reason)
		require.Equal(t, 1, note.Attempt)
		require.Equal(t, at, note.At)
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, orig.ID).Status)

		// The same replay again: a duplicate, no second note.
		again := replay(b.other.ID, "evt-orig~replay-1", at.Add(time.Second), of)
		require.Equal(t, store.InsertDuplicate, again.Outcome)
		require.Len(t, events(ctx, t, s, orig.ID), len(before)+1)

		// The note is the original's host's: another host's delivery of
		// that id is not touched.
		wrongHost := &store.ReplayOf{HostID: b.other.ID, ID: orig.ID, Note: "not mine"}
		replay(b.host.ID, "evt-orig~replay-2", at, wrongHost)
		require.Len(t, events(ctx, t, s, orig.ID), len(before)+1)

		// An original gone (pruned): the replay is stored, nothing noted.
		gone := replay(b.host.ID, "evt-gone~replay-1", at, &store.ReplayOf{HostID: b.host.ID, ID: "github:evt-gone:1", Note: "x"})
		require.Equal(t, store.InsertQueued, gone.Outcome)

		// In a batch beside plain inserts, as the group commit writes them.
		plain := insertParams(b.host.ID, "evt-plain", at, deliveryOpts{})
		rp := insertParams(b.host.ID, "evt-orig~replay-3", at, deliveryOpts{})
		rp.ReplayOf = &store.ReplayOf{HostID: b.host.ID, ID: orig.ID, Note: "replayed as r-3"}
		rs, err := s.DeliveryInsertBatch(ctx, []*store.DeliveryInsertParams{plain, rp})
		require.NoError(t, err)
		require.Equal(t, store.InsertQueued, rs[0].Outcome)
		require.Equal(t, store.InsertQueued, rs[1].Outcome)
		require.Equal(t, "replayed as r-3", lastEvent(ctx, t, s, orig.ID).Reason)
		require.Len(t, events(ctx, t, s, orig.ID), len(before)+2)
	})
}
