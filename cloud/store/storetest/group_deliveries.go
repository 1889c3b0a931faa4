package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// groupBed is a group of three members (the bed's host first).
type groupBed struct {
	group   *store.Group
	members []string
}

func newGroupBed(ctx context.Context, t *testing.T, s store.Store, b *testBundle) groupBed {
	t.Helper()
	g, err := s.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_team", Name: "team", Now: base})
	require.NoError(t, err)
	members := []string{b.host.ID, createHost(ctx, t, s, "h_second", base).ID, createHost(ctx, t, s, "h_third", base).ID}
	for _, m := range members {
		g, err = s.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: g.ID, HostID: m, Now: base})
		require.NoError(t, err)
	}
	// The group's source, and the first member's own of the same name.
	for owner, mode := range map[string]store.GroupMode{g.ID: store.GroupFanout, b.host.ID: ""} {
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: owner, Name: "github", Provider: "github",
			Enabled: true, Mode: mode, Now: base})
		require.NoError(t, err)
	}
	return groupBed{group: g, members: members}
}

// fanoutParams are a fanout's inserts of one event: one per member, one
// body.
func (gb groupBed) fanoutParams(eventID string, at time.Time, body []byte) []*store.DeliveryInsertParams {
	share := &store.BodyShare{}
	ps := make([]*store.DeliveryInsertParams, len(gb.members))
	for i, m := range gb.members {
		p := insertParams(m, eventID, at, deliveryOpts{body: body})
		p.GroupID, p.Lane, p.Share = gb.group.ID, m, share
		p.ID = store.LaneDeliveryID(p.Source, eventID, m, at)
		ps[i] = p
	}
	return ps
}

// anyParams is an any source's insert of one event, held by holder.
func (gb groupBed) anyParams(holder, eventID string, at time.Time) *store.DeliveryInsertParams {
	p := insertParams(holder, eventID, at, deliveryOpts{})
	p.GroupID = gb.group.ID
	return p
}

// exerciseGroupDeliveries covers a group's deliveries: a fanout's, one per
// member sharing one body, and an any source's, one delivery that changes
// hands.
func exerciseGroupDeliveries(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("GroupFanout", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		gb := newGroupBed(ctx, t, s, b)
		body := []byte("{\"fanned\": \"out\"}\n\x00\xff")
		ps := gb.fanoutParams("evt-f", base, body)
		for _, p := range ps {
			p.BodyDigest = []byte("digest-of-the-body")
		}
		res, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(t, err)
		for i, m := range gb.members {
			require.Equal(t, store.InsertQueued, res[i].Outcome, m)
			d := get(ctx, t, s, m, ps[i].ID)
			require.Equal(t, body, d.RawBody, "each member's delivery has the body")
			require.Equal(t, gb.group.ID, d.GroupID)
			require.Equal(t, m, d.Lane)
			require.Equal(t, m, d.HostID)
			for _, other := range gb.members {
				if other != m {
					_, err := s.DeliveryGet(ctx, other, ps[i].ID)
					require.ErrorIs(t, err, store.ErrNotFound, "a member sees only its own")
				}
			}
		}
		// The replay guard looks a group's bodies up by the group, never
		// by a member's own.
		byDigest := &store.DigestLookupParams{GroupID: gb.group.ID, Source: "github", Digest: []byte("digest-of-the-body"),
			Since: base.Add(-time.Hour), EventID: "evt-other"}
		m, err := s.DeliveryByDigest(ctx, byDigest)
		require.NoError(t, err)
		require.Equal(t, "evt-f", m.EventID)
		byDigest.GroupID, byDigest.HostID = "", gb.members[0]
		_, err = s.DeliveryByDigest(ctx, byDigest)
		require.ErrorIs(t, err, store.ErrNotFound, "a member's own source is not guarded by the group's bodies")

		// The provider sends it again: a duplicate for every member.
		again, err := s.DeliveryInsertBatch(ctx, gb.fanoutParams("evt-f", base.Add(time.Second), body))
		require.NoError(t, err)
		for i := range again {
			require.Equal(t, store.InsertDuplicate, again[i].Outcome)
			require.Equal(t, ps[i].ID, again[i].Delivery.ID)
		}
		// The shared body stays while a delivery of the fanout has it.
		for _, m := range gb.members[:2] {
			leased := lease(ctx, t, s, m, 10, 0, base.Add(time.Minute))
			require.Len(t, leased, 1)
			require.Equal(t, body, leased[0].RawBody)
			ack(ctx, t, s, m, base.Add(time.Minute), leased[0].ID)
		}
		n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked, PruneParams: store.PruneParams{Before: base.Add(time.Hour)}})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		last := gb.members[2]
		leased := lease(ctx, t, s, last, 10, 0, base.Add(2*time.Minute))
		require.Len(t, leased, 1)
		require.Equal(t, body, leased[0].RawBody, "the last member's delivery keeps the body")
		found, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{EventID: "evt-f"})
		require.NoError(t, err)
		require.Len(t, found, 1, "by event id")
		// A member's own source of the same name takes the same event id
		// as its own delivery, apart from the group's.
		own := insertFor(ctx, t, s, insertParams(b.host.ID, "evt-f", base.Add(2*time.Second), deliveryOpts{}), store.InsertQueued)
		require.Empty(t, own.Delivery.GroupID)
		found, err = s.DeliveryFind(ctx, &store.DeliveryFindParams{EventID: "evt-f"})
		require.NoError(t, err)
		require.Len(t, found, 2, "the host's own and the one member's of the group left")
		byGroup, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{GroupID: gb.group.ID})
		require.NoError(t, err)
		require.Len(t, byGroup, 1)

		ack(ctx, t, s, last, base.Add(2*time.Minute), leased[0].ID)
		n, err = s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked, PruneParams: store.PruneParams{Before: base.Add(time.Hour)}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	})

	t.Run("GroupFanoutMemberRemoved", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		gb := newGroupBed(ctx, t, s, b)
		ps := gb.fanoutParams("evt-r", base, nil)
		_, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(t, err)
		gone := gb.members[1]
		removed, err := s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: gb.group.ID, HostID: gone, Now: base.Add(time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, removed.Cancelled)
		require.NotContains(t, removed.Group.MemberIDs(), gone)
		d := get(ctx, t, s, gone, ps[1].ID)
		require.Equal(t, store.StatusDLQ, d.Status, "cancelled: kept where an operator sees it")
		evs := events(ctx, t, s, d.ID)
		require.Contains(t, evs[len(evs)-1].Reason, "left the group")
		require.Empty(t, lease(ctx, t, s, gone, 10, 0, base.Add(time.Minute)), "never handed out")
		require.Len(t, lease(ctx, t, s, gb.members[0], 10, 0, base.Add(time.Minute)), 1, "the others keep theirs")

		// A deactivated host stays a member, and is handed nothing new.
		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: gb.members[2], Now: base.Add(time.Minute)})
		require.NoError(t, err)
		g, err := s.GroupGet(ctx, gb.group.ID)
		require.NoError(t, err)
		require.Equal(t, []string{gb.members[0], gb.members[2]}, g.MemberIDs())
		require.Equal(t, []string{gb.members[0]}, g.ActiveMemberIDs())
		require.Equal(t, store.HostDeactivated, g.Members[1].HostStatus)
	})

	t.Run("GroupAnyChangesHands", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		gb := newGroupBed(ctx, t, s, b)
		first, second, third := gb.members[0], gb.members[1], gb.members[2]
		p := gb.anyParams(first, "evt-a", base)
		res := insertFor(ctx, t, s, p, store.InsertQueued)
		require.Equal(t, first, res.Delivery.HostID)
		require.Empty(t, res.Delivery.Lane)

		waiting, err := s.DeliveryGroupWaiting(ctx, gb.group.ID, []string{second, third}, 0)
		require.NoError(t, err)
		require.Equal(t, []store.Waiting{{ID: p.ID, HostID: first}}, waiting)
		waiting, err = s.DeliveryGroupWaiting(ctx, gb.group.ID, []string{first}, 0)
		require.NoError(t, err)
		require.Empty(t, waiting)
		holders, err := s.DeliveryGroupHolders(ctx, gb.group.ID)
		require.NoError(t, err)
		require.Equal(t, map[string]int{first: 1}, holders)

		// Handed to the second member; a move from a holder it no longer
		// has changes nothing.
		n, err := s.DeliveryMove(ctx, &store.DeliveryMoveParams{GroupID: gb.group.ID, Now: base.Add(time.Second), Moves: []store.DeliveryMove{
			{ID: p.ID, From: first, To: second, Reason: "handed to " + second},
			{ID: p.ID, From: first, To: third, Reason: "handed to " + third},
		}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, lease(ctx, t, s, first, 10, 0, base.Add(2*time.Second)))
		evs := events(ctx, t, s, p.ID)
		require.Equal(t, "handed to "+second, evs[len(evs)-1].Reason)

		// The provider sends it again, intake picking another member: the
		// same delivery, a duplicate.
		again := gb.anyParams(third, "evt-a", base.Add(3*time.Second))
		dup := insertFor(ctx, t, s, again, store.InsertDuplicate)
		require.Equal(t, p.ID, dup.Delivery.ID)

		// A failed attempt may hand it on (Failure.MoveTo): the next
		// attempt is the third member's.
		leased := lease(ctx, t, s, second, 10, 0, base.Add(4*time.Second))
		require.Len(t, leased, 1)
		nk := delivery.NackParams(second, []delivery.Nack{{ID: p.ID, Error: "exit 1", Retryable: true}}, delivery.RetryPolicy{}, base.Add(5*time.Second))
		fail := nk.Fail
		nk.Fail = func(f store.Failing) (store.Failure, bool) {
			require.True(t, f.HandedOver())
			fl, ok := fail(f)
			fl.MoveTo = third
			return fl, ok
		}
		n, err = s.DeliveryNack(ctx, nk)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, lease(ctx, t, s, second, 10, 0, base.Add(time.Hour)))
		leased = lease(ctx, t, s, third, 10, 0, base.Add(time.Hour))
		require.Len(t, leased, 1)
		require.Equal(t, 2, leased[0].Attempts)
		require.Equal(t, p.ID, leased[0].ID, "the same delivery, so the same idempotency key")

		// The audit trail of every delivery names, on each event, the
		// member that held the delivery once it was recorded.
		all, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{Limit: 500})
		require.NoError(t, err)
		var trail []string
		for _, e := range all {
			if e.DeliveryID == p.ID {
				require.Equal(t, p.Source, e.Source)
				trail = append(trail, e.Reason+" @"+e.HostID)
			}
		}
		// A hand-over is recorded at the member it hands to, a nack that
		// hands on too.
		require.Equal(t, []string{"received @" + first, "handed to " + second + " @" + second,
			"leased to a heartbeat @" + second, "nacked by host @" + third, "leased to a heartbeat @" + third}, trail)
	})

	t.Run("GroupDeactivatedStillRouted", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		gb := newGroupBed(ctx, t, s, b)
		_, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: gb.group.ID, Name: "github", Provider: "github",
			Enabled: true, Mode: store.GroupAny, Now: base})
		require.NoError(t, err)
		p := gb.anyParams(gb.members[0], "evt-held", base)
		insertFor(ctx, t, s, p, store.InsertQueued)
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: gb.group.ID, Now: base.Add(time.Second)})
		require.NoError(t, err)

		// Deactivated with a delivery waiting: still routed, so that what
		// its members hold is handed over as before.
		rosters, err := s.GroupRosters(ctx)
		require.NoError(t, err)
		require.Len(t, rosters, 1)
		require.Equal(t, gb.group.ID, rosters[0].GroupID)
		require.Equal(t, store.HostDeactivated, rosters[0].Status)
		require.Len(t, rosters[0].Members, len(gb.members))

		// Once nothing of it waits, it is routed no more.
		leased := lease(ctx, t, s, gb.members[0], 10, 0, base.Add(2*time.Second))
		require.Len(t, leased, 1)
		require.Equal(t, 1, ack(ctx, t, s, gb.members[0], base.Add(3*time.Second), p.ID))
		rosters, err = s.GroupRosters(ctx)
		require.NoError(t, err)
		require.Empty(t, rosters)
	})
}
