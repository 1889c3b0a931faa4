package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// createGroup creates a group with no members at now.
func createGroup(ctx context.Context, t *testing.T, s store.Store, id string, now time.Time) *store.Group {
	t.Helper()
	g, err := s.GroupCreate(ctx, &store.GroupCreateParams{ID: id, Name: "name of " + id, RateLimitPerMin: 60, RateLimitBurst: 10, Now: now})
	require.NoError(t, err)
	return g
}

// addMember adds hostID to groupID at now (position 0: after the last)
// and returns the group.
func addMember(ctx context.Context, t *testing.T, s store.Store, groupID, hostID string, position int, now time.Time) *store.Group {
	t.Helper()
	g, err := s.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: groupID, HostID: hostID, Position: position, Now: now})
	require.NoError(t, err)
	return g
}

// groupSource gives groupID a source of mode.
func groupSource(ctx context.Context, t *testing.T, s store.Store, groupID, name string, mode store.GroupMode) *store.Source {
	t.Helper()
	src, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: groupID, Name: name, Provider: "github", Enabled: true,
		Secrets: []store.SealedSecret{{Ciphertext: "c", Fingerprint: "f"}}, Mode: mode, Now: base})
	require.NoError(t, err)
	return src
}

// exerciseGroups covers groups of hosts: the groups, their members and
// their sources.
func exerciseGroups(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("GroupCreateGetList", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(123456789 * time.Nanosecond) // sub-millisecond digits are dropped
		g := createGroup(ctx, t, s, "g_one", now)
		require.Equal(t, &store.Group{
			ID: "g_one", Name: "name of g_one", Status: store.HostActive, RateLimitPerMin: 60, RateLimitBurst: 10,
			CreatedAt: base.Add(123 * time.Millisecond),
		}, g)
		got, err := s.GroupGet(ctx, "g_one")
		require.NoError(t, err)
		require.Equal(t, g, got)
		_, err = s.GroupGet(ctx, "g_nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.GroupGet(ctx, b.host.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "a host is no group")

		_, err = s.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_one", Name: "again", Now: base})
		require.ErrorIs(t, err, store.ErrConflict)

		// Negative limits are stored as 0: the cloud's default.
		zero, err := s.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_two", Name: "two", RateLimitPerMin: -1, RateLimitBurst: -5, Now: base.Add(time.Second)})
		require.NoError(t, err)
		require.Zero(t, zero.RateLimitPerMin)
		require.Zero(t, zero.RateLimitBurst)
		createGroup(ctx, t, s, "g_three", base.Add(-time.Second))
		addMember(ctx, t, s, "g_two", b.other.ID, 0, base)
		addMember(ctx, t, s, "g_two", b.host.ID, 0, base)

		groups, err := s.GroupList(ctx)
		require.NoError(t, err)
		var ids []string
		for _, g := range groups {
			ids = append(ids, g.ID)
		}
		require.Equal(t, []string{"g_three", "g_one", "g_two"}, ids, "oldest first")
		require.Empty(t, groups[0].Members)
		require.Empty(t, groups[1].Members)
		require.Equal(t, []string{b.other.ID, b.host.ID}, groups[2].MemberIDs(), "members in order")
		require.Equal(t, []store.GroupMember{{HostID: b.other.ID, Position: 1, AddedAt: base, HostStatus: store.HostActive}, {HostID: b.host.ID, Position: 2, AddedAt: base, HostStatus: store.HostActive}},
			groups[2].Members)
		one, err := s.GroupGet(ctx, "g_two")
		require.NoError(t, err)
		require.Equal(t, groups[2], one)
	})

	t.Run("GroupUpdate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createGroup(ctx, t, s, "g_one", base)
		addMember(ctx, t, s, "g_one", b.host.ID, 0, base)
		g, err := s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_one", Name: ptr("payments")})
		require.NoError(t, err)
		require.Equal(t, "payments", g.Name)
		require.Equal(t, []int{60, 10}, []int{g.RateLimitPerMin, g.RateLimitBurst}, "untouched")
		require.Equal(t, []string{b.host.ID}, g.MemberIDs(), "with its members")

		g, err = s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_one", RateLimitPerMin: ptr(600)})
		require.NoError(t, err)
		require.Equal(t, []any{"payments", 600, 10}, []any{g.Name, g.RateLimitPerMin, g.RateLimitBurst})
		g, err = s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_one", Name: ptr("billing"), RateLimitPerMin: ptr(0), RateLimitBurst: ptr(40)})
		require.NoError(t, err)
		require.Equal(t, []any{"billing", 0, 40}, []any{g.Name, g.RateLimitPerMin, g.RateLimitBurst})
		got, err := s.GroupGet(ctx, "g_one")
		require.NoError(t, err)
		require.Equal(t, g, got)

		_, err = s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_nope", Name: ptr("x")})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: b.host.ID, Name: ptr("x")})
		require.ErrorIs(t, err, store.ErrNotFound, "a host is no group")
		h, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host.Name, h.Name)
	})

	t.Run("GroupDeactivate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createGroup(ctx, t, s, "g_one", base)
		addMember(ctx, t, s, "g_one", b.host.ID, 0, base)
		at := base.Add(time.Hour)
		g, err := s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: at})
		require.NoError(t, err)
		require.Equal(t, store.HostDeactivated, g.Status)
		require.Equal(t, ptr(at), g.DeactivatedAt)
		require.Equal(t, []string{b.host.ID}, g.MemberIDs(), "its members stay")
		g, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: at.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, ptr(at), g.DeactivatedAt, "deactivated once")
		got, err := s.GroupGet(ctx, "g_one")
		require.NoError(t, err)
		require.Equal(t, g, got)
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_nope", Now: at})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("GroupMemberAdd", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		third := createHost(ctx, t, s, "host-c", base)
		createGroup(ctx, t, s, "g_one", base)

		g := addMember(ctx, t, s, "g_one", b.host.ID, 10, base)
		require.Equal(t, []store.GroupMember{{HostID: b.host.ID, Position: 10, AddedAt: base, HostStatus: store.HostActive}}, g.Members)
		g = addMember(ctx, t, s, "g_one", b.other.ID, 0, base.Add(time.Second))
		require.Equal(t, store.GroupMember{HostID: b.other.ID, Position: 11, AddedAt: base.Add(time.Second), HostStatus: store.HostActive}, g.Members[1], "after the last")
		g = addMember(ctx, t, s, "g_one", third.ID, 5, base.Add(2*time.Second))
		require.Equal(t, []string{third.ID, b.host.ID, b.other.ID}, g.MemberIDs(), "by position")

		// Added again: it keeps its place.
		again := addMember(ctx, t, s, "g_one", b.host.ID, 1, base.Add(time.Hour))
		require.Equal(t, g, again)
		again = addMember(ctx, t, s, "g_one", third.ID, 0, base.Add(time.Hour))
		require.Equal(t, g, again)

		// The same position: in the order they were added.
		createGroup(ctx, t, s, "g_two", base)
		addMember(ctx, t, s, "g_two", b.other.ID, 3, base.Add(time.Second))
		g = addMember(ctx, t, s, "g_two", b.host.ID, 3, base)
		require.Equal(t, []string{b.host.ID, b.other.ID}, g.MemberIDs())

		for name, p := range map[string]*store.GroupMemberParams{
			"unknown host":   {GroupID: "g_one", HostID: "host-nope"},
			"unknown group":  {GroupID: "g_nope", HostID: b.host.ID},
			"a group as one": {GroupID: "g_one", HostID: "g_two"},
			"a host as one":  {GroupID: b.other.ID, HostID: b.host.ID},
		} {
			p.Now = base
			_, err := s.GroupMemberAdd(ctx, p)
			require.ErrorIs(t, err, store.ErrNotFound, name)
		}

		_, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: third.ID, Now: base})
		require.NoError(t, err)
		_, err = s.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_two", HostID: third.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "a deactivated host")
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: base})
		require.NoError(t, err)
		fourth := createHost(ctx, t, s, "host-d", base)
		_, err = s.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: fourth.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "a deactivated group")

		g, err = s.GroupGet(ctx, "g_two")
		require.NoError(t, err)
		require.Equal(t, []string{b.host.ID, b.other.ID}, g.MemberIDs(), "refused adds change nothing")
		g, err = s.GroupGet(ctx, "g_one")
		require.NoError(t, err)
		require.Equal(t, []string{third.ID, b.host.ID, b.other.ID}, g.MemberIDs(), "a deactivated host stays a member")
	})

	t.Run("GroupMemberRemove", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createGroup(ctx, t, s, "g_one", base)
		addMember(ctx, t, s, "g_one", b.host.ID, 0, base)
		addMember(ctx, t, s, "g_one", b.other.ID, 0, base)
		createGroup(ctx, t, s, "g_two", base)
		addMember(ctx, t, s, "g_two", b.other.ID, 0, base)
		// The host's own delivery is no group's: removing it leaves it be.
		d := insert(ctx, t, s, b.other.ID, "e1", base, deliveryOpts{})

		out, err := s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: b.other.ID, Now: base.Add(time.Hour)})
		require.NoError(t, err)
		require.Zero(t, out.Cancelled)
		require.Equal(t, []string{b.host.ID}, out.Group.MemberIDs())
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.other.ID, d.ID).Status)
		g, err := s.GroupGet(ctx, "g_two")
		require.NoError(t, err)
		require.Equal(t, []string{b.other.ID}, g.MemberIDs(), "only from that group")

		_, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: b.other.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "no longer a member")
		_, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_nope", HostID: b.host.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown group")
		_, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: "host-nope", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown host")

		// A deactivated group's members can still be removed.
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: base})
		require.NoError(t, err)
		out, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: b.host.ID, Now: base})
		require.NoError(t, err)
		require.Empty(t, out.Group.Members)
	})

	t.Run("GroupsOfHost", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createGroup(ctx, t, s, "g_b", base)
		createGroup(ctx, t, s, "g_a", base.Add(time.Second))
		createGroup(ctx, t, s, "g_c", base)
		addMember(ctx, t, s, "g_b", b.host.ID, 0, base)
		addMember(ctx, t, s, "g_a", b.host.ID, 0, base)
		addMember(ctx, t, s, "g_c", b.other.ID, 0, base)
		_, err := s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_b", Now: base})
		require.NoError(t, err)

		of, err := s.GroupsOfHost(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, []store.GroupMemberOf{{GroupID: "g_a", Name: "name of g_a"}, {GroupID: "g_b", Name: "name of g_b"}}, of,
			"by id, a deactivated group too")
		of, err = s.GroupsOfHost(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, []store.GroupMemberOf{{GroupID: "g_c", Name: "name of g_c"}}, of)
		of, err = s.GroupsOfHost(ctx, "host-nope")
		require.NoError(t, err)
		require.Empty(t, of)
	})

	t.Run("GroupRosters", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		third := createHost(ctx, t, s, "host-c", base)
		seen := base.Add(time.Minute)
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.0", Now: seen}))
		_, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: third.ID, Now: base})
		require.NoError(t, err)

		// g_any: active with an any source; its members with their own
		// status and last heartbeat, in order.
		createGroup(ctx, t, s, "g_any", base)
		addMember(ctx, t, s, "g_any", b.other.ID, 2, base)
		addMember(ctx, t, s, "g_any", b.host.ID, 1, base)
		groupSource(ctx, t, s, "g_any", "github", store.GroupAny)
		groupSource(ctx, t, s, "g_any", "stripe", store.GroupFanout)
		// g_both: the same host in another any group.
		createGroup(ctx, t, s, "g_both", base)
		addMember(ctx, t, s, "g_both", b.host.ID, 0, base)
		groupSource(ctx, t, s, "g_both", "github", store.GroupAny)
		// Not routed by roster: fanout sources only, no source, deactivated.
		createGroup(ctx, t, s, "g_fanout", base)
		addMember(ctx, t, s, "g_fanout", b.host.ID, 0, base)
		groupSource(ctx, t, s, "g_fanout", "github", store.GroupFanout)
		createGroup(ctx, t, s, "g_bare", base)
		addMember(ctx, t, s, "g_bare", b.host.ID, 0, base)
		createGroup(ctx, t, s, "g_gone", base)
		addMember(ctx, t, s, "g_gone", b.host.ID, 0, base)
		groupSource(ctx, t, s, "g_gone", "github", store.GroupAny)
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_gone", Now: base})
		require.NoError(t, err)
		// A host's own source of the same name makes no group routed.
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true, Now: base})
		require.NoError(t, err)
		// A member deactivated after it joined is listed as deactivated.
		createGroup(ctx, t, s, "g_late", base)
		fourth := createHost(ctx, t, s, "host-d", base)
		addMember(ctx, t, s, "g_late", fourth.ID, 0, base)
		addMember(ctx, t, s, "g_late", b.host.ID, 0, base)
		groupSource(ctx, t, s, "g_late", "github", store.GroupAny)
		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: fourth.ID, Now: base})
		require.NoError(t, err)

		rosters, err := s.GroupRosters(ctx)
		require.NoError(t, err)
		require.Equal(t, []*store.GroupRoster{
			{GroupID: "g_any", Status: store.HostActive, Members: []store.RosterMember{
				{HostID: b.host.ID, Status: store.HostActive, LastHeartbeatAt: ptr(seen)},
				{HostID: b.other.ID, Status: store.HostActive},
			}},
			{GroupID: "g_both", Status: store.HostActive, Members: []store.RosterMember{
				{HostID: b.host.ID, Status: store.HostActive, LastHeartbeatAt: ptr(seen)},
			}},
			{GroupID: "g_late", Status: store.HostActive, Members: []store.RosterMember{
				{HostID: fourth.ID, Status: store.HostDeactivated},
				{HostID: b.host.ID, Status: store.HostActive, LastHeartbeatAt: ptr(seen)},
			}},
		}, rosters)
	})

	t.Run("GroupListenChanged", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		changed := make(chan string, 100)
		stop := listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(string) {},
			Changed:   func(id string) { changed <- id },
		})
		next := func(what string) string {
			t.Helper()
			return receive(t, changed, "no change told: "+what)
		}
		createGroup(ctx, t, s, "g_one", base)
		require.Equal(t, "g_one", next("create"))
		_, err := s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_one", RateLimitBurst: ptr(5)})
		require.NoError(t, err)
		require.Equal(t, "g_one", next("update"))
		addMember(ctx, t, s, "g_one", b.host.ID, 0, base)
		require.Equal(t, "g_one", next("member add"))
		_, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: b.host.ID, Now: base})
		require.NoError(t, err)
		require.Equal(t, "g_one", next("member remove"))
		groupSource(ctx, t, s, "g_one", "github", store.GroupAny)
		require.Equal(t, "g_one", next("source upsert"))

		// What changed nothing tells nothing: a mark comes next.
		_, err = s.GroupUpdate(ctx, &store.GroupUpdateParams{GroupID: "g_nope", Name: ptr("x")})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: "g_one", HostID: b.host.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.GroupsOfHost(ctx, b.host.ID)
		require.NoError(t, err)
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: base})
		require.NoError(t, err)
		require.Equal(t, "g_one", next("deactivate"))

		require.NoError(t, stop())
		select {
		case id := <-changed:
			t.Fatalf("told more than the changes: %s", id)
		default:
		}
	})

	t.Run("GroupSources", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createGroup(ctx, t, s, "g_one", base)
		p := &store.SourceUpsertParams{
			HostID: "g_one", Name: "github", Provider: "github", Enabled: true, Events: []string{"push"},
			Secrets: []store.SealedSecret{{Ciphertext: "c1", Fingerprint: "f1"}}, Options: map[string]string{"k": "v"},
			MaxBodyBytes: 1 << 20, AllowedIPs: []string{"github"}, RetryDelays: []time.Duration{0, time.Minute}, MaxAttempts: 3,
			Mode: store.GroupAny, Now: base,
		}
		src, err := s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		want := &store.Source{
			HostID: "g_one", Name: "github", Provider: "github", Enabled: true, Events: p.Events, Secrets: p.Secrets,
			Options: p.Options, MaxBodyBytes: 1 << 20, AllowedIPs: p.AllowedIPs, RetryDelays: p.RetryDelays, MaxAttempts: 3,
			Mode: store.GroupAny, CreatedAt: base, UpdatedAt: base,
		}
		require.Equal(t, want, src)
		got, err := s.SourceGet(ctx, "g_one", "github")
		require.NoError(t, err)
		require.Equal(t, want, got)

		// The mode changes as any other field; created_at stays.
		p.Mode, p.Now = store.GroupFanout, base.Add(time.Hour)
		src, err = s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, store.GroupFanout, src.Mode)
		require.Equal(t, base, src.CreatedAt)
		require.Equal(t, base.Add(time.Hour), src.UpdatedAt)

		// A host's source of the same name is its own, with no mode.
		own, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true, Now: base})
		require.NoError(t, err)
		require.Empty(t, own.Mode)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: "g_one", Name: "billing", Provider: "stripe", Enabled: true,
			Mode: store.GroupAny, Now: base})
		require.NoError(t, err)

		list, err := s.SourceList(ctx, "g_one")
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, []string{"billing", "github"}, []string{list[0].Name, list[1].Name}, "by name")
		require.Equal(t, []store.GroupMode{store.GroupAny, store.GroupFanout}, []store.GroupMode{list[0].Mode, list[1].Mode})
		hosts, err := s.SourceList(ctx, b.host.ID)
		require.NoError(t, err)
		require.Len(t, hosts, 1)
		require.Equal(t, b.host.ID, hosts[0].HostID)
		require.Empty(t, hosts[0].Mode)

		_, err = s.SourceGet(ctx, "g_one", "stripe")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: "g_nope", Name: "github", Provider: "github", Mode: store.GroupAny, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "neither a host nor a group")
		_, err = s.SourceGet(ctx, "g_nope", "github")
		require.ErrorIs(t, err, store.ErrNotFound)

		// A deactivated group keeps its sources.
		_, err = s.GroupDeactivate(ctx, &store.GroupDeactivateParams{GroupID: "g_one", Now: base})
		require.NoError(t, err)
		list, err = s.SourceList(ctx, "g_one")
		require.NoError(t, err)
		require.Len(t, list, 2)
	})
}
