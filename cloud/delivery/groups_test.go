package delivery_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

// groupRig is an any group of three members on a real store, routed by
// delivery.Groups on a fake clock.
type groupRig struct {
	t       *testing.T
	ctx     context.Context
	st      store.Store
	clock   *clockwork.FakeClock
	groups  *delivery.Groups
	id      string
	members []string
}

func newGroupRig(t *testing.T) *groupRig {
	ctx := context.Background()
	st := sqlitetest.Open(t)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	r := &groupRig{t: t, ctx: ctx, st: st, clock: clock, id: "g_rig",
		groups: delivery.NewGroups(st, delivery.GroupsConfig{OnlineWithin: time.Minute}, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	_, err := st.GroupCreate(ctx, &store.GroupCreateParams{ID: r.id, Name: "rig", Now: clock.Now()})
	require.NoError(t, err)
	for _, h := range []string{"h_a", "h_b", "h_c"} {
		_, err := st.HostCreate(ctx, &store.HostCreateParams{ID: h, Name: h, Now: clock.Now()})
		require.NoError(t, err)
		_, err = st.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: r.id, HostID: h, Now: clock.Now()})
		require.NoError(t, err)
		r.members = append(r.members, h)
	}
	_, err = st.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: r.id, Name: "github", Provider: "github", Enabled: true,
		Mode: store.GroupAny, Now: clock.Now()})
	require.NoError(t, err)
	return r
}

// heard records a heartbeat of each host now.
func (r *groupRig) heard(hosts ...string) {
	for _, h := range hosts {
		require.NoError(r.t, r.st.HostHeartbeat(r.ctx, &store.HostHeartbeatParams{HostID: h, Now: r.clock.Now()}))
	}
	require.NoError(r.t, r.groups.Refresh(r.ctx))
}

// insert stores an any delivery of the group held by holder.
func (r *groupRig) insert(holder, event string) string {
	at := r.clock.Now()
	p := &store.DeliveryInsertParams{ID: store.DeliveryID("github", event, at), HostID: holder, GroupID: r.id,
		Source: "github", EventID: event, RawBody: []byte("{}"), ReceivedAt: at}
	res, err := r.st.DeliveryInsert(r.ctx, p)
	require.NoError(r.t, err)
	return res.Delivery.ID
}

// pick is the first choice of Pick among the rig's members.
func (r *groupRig) pick() string { return r.groups.Pick(r.id, r.members)[0] }

func (r *groupRig) holder(id string) string {
	for _, h := range r.members {
		if d, err := r.st.DeliveryGet(r.ctx, h, id); err == nil {
			return d.HostID
		}
	}
	return ""
}

// Pick spreads new deliveries over the online members in turn, skips the
// ones not online, and falls back to the first member when none is.
func TestGroupsPickInTurnAmongOnline(t *testing.T) {
	r := newGroupRig(t)
	a, b, c := r.members[0], r.members[1], r.members[2]
	require.Equal(t, a, r.pick(), "no one online: the first")
	r.heard(a, c)
	var picked []string
	for range 4 {
		picked = append(picked, r.pick())
	}
	require.Equal(t, []string{a, c, a, c}, picked)
	require.Equal(t, []string{a, c}, r.groups.Pick(r.id, r.members), "every online member, the next in turn first")
	require.Equal(t, []string{c, a}, r.groups.Pick(r.id, r.members))

	// A socket open makes a member online whatever its last contact; its
	// closing makes it offline at once, until it is heard from again.
	r.clock.Advance(2 * time.Minute)
	r.groups.Socket(store.SocketEvent{HostID: b, Epoch: 7, Open: true})
	require.Equal(t, b, r.pick())
	r.groups.Socket(store.SocketEvent{HostID: b, Epoch: 6}) // an older socket, taken over
	require.Equal(t, b, r.pick(), "a socket taken over closing changes nothing")
	r.groups.Socket(store.SocketEvent{HostID: b, Epoch: 7})
	require.Equal(t, a, r.pick(), "none online")
	r.clock.Advance(time.Second)
	r.heard(b)
	require.Equal(t, b, r.pick())

	// A long poll hung up: gone until heard from again; a socket open
	// says otherwise.
	r.groups.Gone(b)
	require.Equal(t, a, r.pick())
	r.clock.Advance(time.Second)
	r.heard(b)
	require.Equal(t, b, r.pick())
	r.groups.Socket(store.SocketEvent{HostID: c, Epoch: 9, Open: true})
	r.groups.Gone(c)
	require.Equal(t, c, r.pick(), "its socket is open")
}

// A failed attempt hands an any delivery to the next online member: after
// a handler failed, on its schedule; after the holder vanished (its lease
// ran out), at once with the attempt given back. A host's own delivery is
// decided as ever.
func TestGroupsHandover(t *testing.T) {
	r := newGroupRig(t)
	a, b, c := r.members[0], r.members[1], r.members[2]
	r.heard(a, b, c)
	now := r.clock.Now()
	f := store.Failing{ID: "d", HostID: b, Status: store.StatusDelivered, Attempts: 1, MaxAttempts: 3, GroupID: r.id}
	nack := delivery.NackParams(b, []delivery.Nack{{ID: "d", Error: "exit 1", Retryable: true}}, delivery.DefaultRetryPolicy, now)
	fl, ok := r.groups.Handover(nack.Fail, now)(f)
	require.True(t, ok)
	require.Equal(t, c, fl.MoveTo, "the next member after the one that failed it")
	require.Equal(t, store.StatusRetrying, fl.To)
	require.Equal(t, now.Add(30*time.Second), *fl.NextRetryAt, "on its schedule")
	require.Zero(t, fl.MaxAttempts, "the attempt counts")
	require.Contains(t, fl.Reason, "handed to "+c)

	f.HostID = c
	expire := delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, 0, now)
	fl, ok = r.groups.Handover(expire.Fail, now)(f)
	require.True(t, ok)
	require.Equal(t, a, fl.MoveTo, "round the order")
	require.Equal(t, now, *fl.NextRetryAt, "at once: the holder vanished")
	require.Equal(t, 4, fl.MaxAttempts, "the attempt given back")

	own := store.Failing{ID: "o", HostID: b, Status: store.StatusDelivered, Attempts: 1, MaxAttempts: 3}
	fl, _ = r.groups.Handover(nack.Fail, now)(own)
	require.Empty(t, fl.MoveTo, "a host's own delivery stays its own")
	fan := own
	fan.GroupID, fan.Lane = r.id, b
	fl, _ = r.groups.Handover(nack.Fail, now)(fan)
	require.Empty(t, fl.MoveTo, "a fanout's delivery is its member's")

	// Alone online, the holder keeps it.
	r.clock.Advance(2 * time.Minute)
	r.heard(c)
	f.HostID = c
	fl, _ = r.groups.Handover(nack.Fail, r.clock.Now())(f)
	require.Empty(t, fl.MoveTo)
}

// Rebalance hands the deliveries waiting on members that are not online
// to those that are, in turn; with none online, they wait.
func TestGroupsRebalance(t *testing.T) {
	r := newGroupRig(t)
	a, b, c := r.members[0], r.members[1], r.members[2]
	var ids []string
	for _, ev := range []string{"e1", "e2", "e3", "e4"} {
		ids = append(ids, r.insert(b, ev))
	}
	n, err := r.groups.Rebalance(r.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "no one online: they wait")

	r.heard(a, c)
	n, err = r.groups.Rebalance(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	got := map[string]int{}
	for _, id := range ids {
		got[r.holder(id)]++
	}
	require.Equal(t, map[string]int{a: 2, c: 2}, got)

	// A removed member's waiting deliveries go too.
	r.heard(a, b, c)
	moved := r.insert(b, "e5")
	_, err = r.st.GroupMemberRemove(r.ctx, &store.GroupMemberParams{GroupID: r.id, HostID: b, Now: r.clock.Now()})
	require.NoError(t, err)
	require.NoError(t, r.groups.Refresh(r.ctx))
	n, err = r.groups.Rebalance(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Contains(t, []string{a, c}, r.holder(moved))
}

// A backlog one member holds (stored while no one else was online) is
// spread over the members online: its newest go, the share of each evened
// out; a small surplus stays where it is.
func TestGroupsRebalanceSpreads(t *testing.T) {
	r := newGroupRig(t)
	a, b, c := r.members[0], r.members[1], r.members[2]
	var ids []string
	for i := range 90 {
		r.clock.Advance(time.Millisecond)
		ids = append(ids, r.insert(a, fmt.Sprintf("e%d", i)))
	}
	r.heard(a, b, c)
	n, err := r.groups.Rebalance(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 60, n)
	got := map[string]int{}
	for _, id := range ids {
		got[r.holder(id)]++
	}
	require.Equal(t, map[string]int{a: 30, b: 30, c: 30}, got)
	require.Equal(t, a, r.holder(ids[0]), "the oldest stay with the member draining them")
	n, err = r.groups.Rebalance(r.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "even: nothing moves")
}
