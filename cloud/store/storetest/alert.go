package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

func claim(ctx context.Context, t *testing.T, s store.Store, h *store.Host, now time.Time) {
	t.Helper()
	_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-" + h.ID), CredentialHash: hashOf("cred-" + h.ID), Now: now})
	require.NoError(t, err)
}

func payloadOf(a *store.Alert) ([]byte, error) {
	return json.Marshal(map[string]any{"id": a.ID, "rule": a.Rule})
}

func exerciseAlerts(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseAcquire", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		acquire := func(holder string, now time.Time) bool {
			ok, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "alerts", Holder: holder, Until: now.Add(10 * time.Second), Now: now})
			require.NoError(t, err)
			return ok
		}
		require.True(t, acquire("a", base), "a free lease")
		require.False(t, acquire("b", base.Add(5*time.Second)), "held by a")
		require.True(t, acquire("a", base.Add(5*time.Second)), "renewed by its holder")
		require.False(t, acquire("b", base.Add(14*time.Second)))
		require.True(t, acquire("b", base.Add(15*time.Second)), "expired: b takes it")
		require.False(t, acquire("a", base.Add(16*time.Second)))

		held := func(prefix string, now time.Time) int {
			n, err := s.LeasesHeld(ctx, prefix, now)
			require.NoError(t, err)
			return n
		}
		for _, r := range []string{"r1", "r2"} {
			ok, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "replica/" + r, Holder: r, Until: base.Add(30 * time.Second), Now: base})
			require.NoError(t, err)
			require.True(t, ok)
		}
		require.Equal(t, 2, held("replica/", base), "the other names' leases are not counted")
		require.Equal(t, 3, held("", base.Add(20*time.Second)))
		require.Equal(t, 0, held("replica/", base.Add(30*time.Second)), "expired at their until")
		require.Equal(t, 0, held("replica_", base), "a prefix is not a pattern")
		require.NoError(t, s.LeaseRelease(ctx, "replica/r1", "r2"))
		require.Equal(t, 2, held("replica/", base), "only its holder releases a lease")
		require.NoError(t, s.LeaseRelease(ctx, "replica/r1", "r1"))
		require.Equal(t, 1, held("replica/", base))
		require.True(t, acquire("a", base.Add(40*time.Second)), "released and expired leases are free")
	})

	t.Run("Presence", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		claim(ctx, t, s, b.host, base)
		// b.other is never claimed: no presence.
		changes := func(now time.Time) []*store.PresenceChange {
			cs, err := s.PresenceChanges(ctx, &store.PresenceChangesParams{LateBefore: now.Add(-time.Minute), OfflineBefore: now.Add(-3 * time.Minute)})
			require.NoError(t, err)
			return cs
		}
		cs := changes(base)
		require.Len(t, cs, 1)
		require.Equal(t, b.host.ID, cs[0].HostID)
		require.Equal(t, store.Presence(""), cs[0].State)
		set := func(from, to store.Presence, now time.Time) bool {
			made, err := s.PresenceSet(ctx, &store.PresenceSetParams{Now: now,
				Changes: []store.PresenceMove{{HostID: b.host.ID, From: from, To: to}}})
			require.NoError(t, err)
			require.Len(t, made, 1)
			return made[0]
		}
		require.True(t, set("", store.PresenceOnline, base))
		require.False(t, set("", store.PresenceOnline, base), "recorded already")
		require.Empty(t, changes(base.Add(time.Minute)), "online up to the late cut")

		cs = changes(base.Add(2 * time.Minute))
		require.Len(t, cs, 1, "late")
		require.Equal(t, store.PresenceOnline, cs[0].State)
		require.Equal(t, base, *cs[0].Since)
		require.True(t, set(store.PresenceOnline, store.PresenceLate, base.Add(2*time.Minute)))
		require.False(t, set(store.PresenceOnline, store.PresenceOffline, base.Add(2*time.Minute)), "guarded on the recorded state")
		require.True(t, set(store.PresenceLate, store.PresenceOffline, base.Add(4*time.Minute)))

		counts, err := s.PresenceCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[store.Presence]int{store.PresenceOffline: 1}, counts)
		off, err := s.PresenceList(ctx, &store.PresenceListParams{State: store.PresenceOffline})
		require.NoError(t, err)
		require.Len(t, off, 1)
		require.Equal(t, base.Add(4*time.Minute), *off[0].Since)

		// A heartbeat brings it back: the change shows at once.
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, Now: base.Add(10 * time.Minute)}))
		cs = changes(base.Add(10 * time.Minute))
		require.Len(t, cs, 1)
		require.Equal(t, store.PresenceOffline, cs[0].State)
		require.Equal(t, base.Add(10*time.Minute), *cs[0].LastContact)
		require.True(t, set(store.PresenceOffline, store.PresenceOnline, base.Add(10*time.Minute)))

		evs, err := s.PresenceEventList(ctx, b.host.ID, 0)
		require.NoError(t, err)
		require.Len(t, evs, 4)
		require.Equal(t, store.PresenceOffline, evs[0].From)
		require.Equal(t, store.PresenceOnline, evs[0].To)
		require.Equal(t, 6*time.Minute, evs[0].Lasted, "offline for six minutes")
		require.Equal(t, base.Add(10*time.Minute), evs[0].At)
		require.Equal(t, store.Presence(""), evs[3].From)

		// A deactivated host leaves presence.
		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: base.Add(11 * time.Minute)})
		require.NoError(t, err)
		require.Empty(t, changes(base.Add(time.Hour)))
	})

	t.Run("PresenceSetMany", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		h, o := b.host.ID, b.other.ID
		set := func(now time.Time, ms ...store.PresenceMove) []bool {
			made, err := s.PresenceSet(ctx, &store.PresenceSetParams{Changes: ms, Now: now})
			require.NoError(t, err)
			return made
		}
		require.Empty(t, set(base))
		require.Equal(t, []bool{true, false, true}, set(base,
			store.PresenceMove{HostID: h, To: store.PresenceOnline},
			store.PresenceMove{HostID: "h-not-stored", To: store.PresenceOnline},
			store.PresenceMove{HostID: o, To: store.PresenceLate}), "a host not stored is skipped, the others made")
		require.Equal(t, []bool{false, false, true, true, false}, set(base.Add(time.Minute),
			store.PresenceMove{HostID: h, To: store.PresenceOffline},
			store.PresenceMove{HostID: h, From: store.PresenceLate, To: store.PresenceOffline},
			store.PresenceMove{HostID: h, From: store.PresenceOnline, To: store.PresenceLate},
			store.PresenceMove{HostID: o, From: store.PresenceLate, To: store.PresenceOffline},
			store.PresenceMove{HostID: o, From: store.PresenceOffline, To: store.PresenceOnline}),
			"recorded already; From no longer recorded; made; made; the host's second change of the call")

		late, err := s.PresenceList(ctx, &store.PresenceListParams{State: store.PresenceLate})
		require.NoError(t, err)
		require.Len(t, late, 1)
		require.Equal(t, h, late[0].HostID)
		require.Equal(t, base.Add(time.Minute), *late[0].Since)
		counts, err := s.PresenceCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[store.Presence]int{store.PresenceLate: 1, store.PresenceOffline: 1}, counts)
		for _, want := range []struct {
			host string
			to   store.Presence
		}{{h, store.PresenceLate}, {o, store.PresenceOffline}} {
			evs, err := s.PresenceEventList(ctx, want.host, 0)
			require.NoError(t, err)
			require.Len(t, evs, 2, want.host)
			require.Equal(t, want.to, evs[0].To)
			require.Equal(t, time.Minute, evs[0].Lasted, want.host)
			require.Equal(t, base.Add(time.Minute), evs[0].At)
			require.Equal(t, store.Presence(""), evs[1].From)
			require.Zero(t, evs[1].Lasted)
		}
	})

	t.Run("AlertFireMany", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, id := range []string{"s_a", "s_b"} {
			require.NoError(t, s.AlertSinkCreate(ctx, &store.AlertSink{ID: id, Kind: "webhook", Target: "http://x", URLSealed: "sealed", CreatedAt: base}))
		}
		alertOf := func(i int) *store.AlertFireParams {
			return &store.AlertFireParams{Rule: "oldest_pending", Key: fmt.Sprintf("host:%s/%04d", b.host.ID, i), HostID: b.host.ID,
				Summary: fmt.Sprintf("waiting %d", i), Payload: payloadOf, Now: base}
		}
		first, err := s.AlertFire(ctx, []*store.AlertFireParams{alertOf(0)})
		require.NoError(t, err)
		require.NotNil(t, first[0])
		// 600 at once, the first firing already, one twice: more rows
		// than one statement takes, of alerts and of notices (two sinks).
		var ps []*store.AlertFireParams
		for i := range 600 {
			ps = append(ps, alertOf(i))
		}
		ps = append(ps, alertOf(7))
		fired, err := s.AlertFire(ctx, ps)
		require.NoError(t, err)
		require.Len(t, fired, len(ps))
		require.Nil(t, fired[0], "firing already")
		require.Nil(t, fired[600], "the same alert twice: fired once")
		ids := map[int64]bool{}
		for i, a := range fired[1:600] {
			require.NotNil(t, a, i+1)
			require.Equal(t, ps[i+1].Key, a.Key)
			require.Equal(t, ps[i+1].Summary, a.Summary)
			require.Equal(t, base, a.StartedAt)
			ids[a.ID] = true
		}
		require.Len(t, ids, 599)
		firing, err := s.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, firing, 600)

		// Every sink has each new alert's notice, in the order given.
		sinks, err := s.AlertSinkList(ctx)
		require.NoError(t, err)
		for _, k := range sinks {
			require.Equal(t, 600, k.Queued, k.ID)
		}
		for i := range 600 {
			ns, err := s.AlertOutboxDue(ctx, &store.AlertOutboxDueParams{Now: base})
			require.NoError(t, err)
			require.Len(t, ns, 2, "each sink's head")
			want := first[0].ID
			if i > 0 {
				want = fired[i].ID
			}
			for _, n := range ns {
				require.JSONEq(t, `{"id": `+itoa(want)+`, "rule": "oldest_pending"}`, string(n.Payload), "notice %d of %s", i, n.Sink.ID)
				require.NoError(t, s.AlertOutboxSent(ctx, &store.AlertOutboxSentParams{ID: n.ID, SinkID: n.Sink.ID, Now: base}))
			}
		}

		// Reminders and resolutions of them all, one call each.
		later := base.Add(time.Hour)
		var reminders, resolutions []*store.AlertNoticeParams
		for _, a := range firing {
			sent := a.LastSentAt
			if a.ID == first[0].ID {
				sent = base.Add(-time.Second) // not what was last sent
			}
			reminders = append(reminders, &store.AlertNoticeParams{ID: a.ID, LastSentAt: sent, Payload: []byte(`{"reminder": 1}`), Now: later})
			resolutions = append(resolutions, &store.AlertNoticeParams{ID: a.ID, Payload: []byte(`{"resolved": 1}`), Now: later})
		}
		resolutions = append(resolutions, resolutions[3])
		done, err := s.AlertRemind(ctx, reminders)
		require.NoError(t, err)
		for i, a := range firing {
			require.Equal(t, a.ID != first[0].ID, done[i], a.ID)
		}
		done, err = s.AlertResolve(ctx, resolutions)
		require.NoError(t, err)
		require.Len(t, done, 601)
		require.NotContains(t, done[:600], false)
		require.False(t, done[600], "resolved already")
		firing, err = s.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: 1000})
		require.NoError(t, err)
		require.Empty(t, firing)
		sinks, err = s.AlertSinkList(ctx)
		require.NoError(t, err)
		for _, k := range sinks {
			require.Equal(t, 599+600, k.Queued, k.ID)
		}

		names, err := s.HostNames(ctx, []string{b.host.ID, b.other.ID, "h-not-stored"})
		require.NoError(t, err)
		require.Equal(t, map[string]string{b.host.ID: b.host.Name, b.other.ID: b.other.Name}, names)
		names, err = s.HostNames(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, names)
	})

	t.Run("BacklogAndFailures", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		insert(ctx, t, s, b.host.ID, "old", base, deliveryOpts{})
		insert(ctx, t, s, b.host.ID, "new", base.Add(time.Minute), deliveryOpts{})
		dead := insert(ctx, t, s, b.host.ID, "dead", base.Add(2*time.Minute), deliveryOpts{maxAttempts: 1, source: "stripe"})
		insert(ctx, t, s, b.other.ID, "other", base.Add(30*time.Second), deliveryOpts{source: "stripe"})
		done := insert(ctx, t, s, b.other.ID, "done", base.Add(-time.Hour), deliveryOpts{source: "stripe"})

		// other: "done" acked, "other" fails three attempts.
		now := base.Add(3 * time.Minute)
		require.Len(t, handOut(ctx, t, s, b.other.ID, 10, 0, now), 2)
		require.Equal(t, 1, ack(ctx, t, s, b.other.ID, now, done.ID))
		otherID := deliveryID("stripe", "other", base.Add(30*time.Second))
		for i := range 2 {
			if i > 0 {
				now = now.Add(time.Hour)
				require.Len(t, handOut(ctx, t, s, b.other.ID, 10, 0, now), 1)
			}
			require.Equal(t, 1, nack(ctx, t, s, b.other.ID, now, delivery.Nack{ID: otherID, Error: "boom", Retryable: true}))
		}
		// host: "dead" dead-letters on its one attempt.
		leased := handOut(ctx, t, s, b.host.ID, 10, 0, base.Add(3*time.Minute))
		require.Len(t, leased, 3)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base.Add(3*time.Minute), delivery.Nack{ID: dead.ID, Error: "boom", Retryable: true}))

		// A third host holds only a dead letter: it comes last.
		third := createHost(ctx, t, s, "host-c", base)
		toDLQ(ctx, t, s, third.ID, "only-dead", base.Add(-2*time.Hour))

		bs, err := s.BacklogByHost(ctx, &store.BacklogParams{DLQSince: base.Add(3 * time.Minute)})
		require.NoError(t, err)
		require.Len(t, bs, 3)
		require.Equal(t, store.HostBacklog{HostID: b.host.ID, Pending: 2, OldestPending: ptr(base), DLQ: 1, NewDLQ: 1}, *bs[0])
		require.Equal(t, store.HostBacklog{HostID: b.other.ID, Pending: 1, OldestPending: ptr(base.Add(30 * time.Second))}, *bs[1])
		require.Equal(t, store.HostBacklog{HostID: third.ID, DLQ: 1}, *bs[2], "no waiting delivery, a dead letter before DLQSince")

		bs, err = s.BacklogByHost(ctx, &store.BacklogParams{DLQSince: base.Add(4 * time.Minute), Limit: 1})
		require.NoError(t, err)
		require.Len(t, bs, 1, "bounded")
		require.Equal(t, 0, bs[0].NewDLQ, "dead-lettered before DLQSince")

		// Of some hosts only (a page of the console's hosts).
		bs, err = s.BacklogByHost(ctx, &store.BacklogParams{DLQSince: base.Add(3 * time.Minute), HostIDs: []string{third.ID, b.host.ID, "h_nope"}})
		require.NoError(t, err)
		require.Len(t, bs, 2)
		require.Equal(t, store.HostBacklog{HostID: b.host.ID, Pending: 2, OldestPending: ptr(base), DLQ: 1, NewDLQ: 1}, *bs[0])
		require.Equal(t, store.HostBacklog{HostID: third.ID, DLQ: 1}, *bs[1])
		bs, err = s.BacklogByHost(ctx, &store.BacklogParams{DLQSince: base, HostIDs: []string{}})
		require.NoError(t, err)
		require.Empty(t, bs, "of no host")

		fs, err := s.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: 2})
		require.NoError(t, err)
		require.Equal(t, []*store.SourceFailures{{HostID: b.other.ID, Source: "stripe", Attempts: 2, Retrying: 1}}, fs)
		fs, err = s.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: 3})
		require.NoError(t, err)
		require.Empty(t, fs)

		// A source's count holds its retrying deliveries that failed
		// fewer times than the threshold too; a source with none past it
		// is not listed.
		now = now.Add(time.Hour)
		insert(ctx, t, s, b.other.ID, "other-2", now, deliveryOpts{source: "stripe"})
		insert(ctx, t, s, b.other.ID, "gh", now, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.other.ID, 10, 0, now), 3)
		for _, id := range []string{deliveryID("stripe", "other-2", now), deliveryID("github", "gh", now)} {
			require.Equal(t, 1, nack(ctx, t, s, b.other.ID, now, delivery.Nack{ID: id, Error: "boom", Retryable: true}))
		}
		require.Equal(t, 1, nack(ctx, t, s, b.other.ID, now, delivery.Nack{ID: otherID, Error: "boom", Retryable: true}))
		fs, err = s.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: 3})
		require.NoError(t, err)
		require.Equal(t, []*store.SourceFailures{{HostID: b.other.ID, Source: "stripe", Attempts: 3, Retrying: 2}}, fs)
		fs, err = s.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: 1})
		require.NoError(t, err)
		require.Equal(t, []*store.SourceFailures{
			{HostID: b.other.ID, Source: "stripe", Attempts: 3, Retrying: 2},
			{HostID: b.other.ID, Source: "github", Attempts: 1, Retrying: 1},
		}, fs, "the most attempts first")
	})

	t.Run("AlertsAndOutbox", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, id := range []string{"s_a", "s_b"} {
			require.NoError(t, s.AlertSinkCreate(ctx, &store.AlertSink{ID: id, Kind: "webhook", Target: "http://x", URLSealed: "sealed", CreatedAt: base}))
		}
		require.ErrorIs(t, s.AlertSinkCreate(ctx, &store.AlertSink{ID: "s_a", Kind: "slack", Target: "x", URLSealed: "x", CreatedAt: base}), store.ErrConflict)
		require.NoError(t, s.AlertSinkReseal(ctx, &store.AlertSinkResealParams{ID: "s_b", URLSealed: "resealed", SecretSealed: "secret"}))
		require.ErrorIs(t, s.AlertSinkReseal(ctx, &store.AlertSinkResealParams{ID: "s_x", URLSealed: "x"}), store.ErrNotFound)
		resealed, err := s.AlertSinkList(ctx)
		require.NoError(t, err)
		require.Equal(t, "resealed", resealed[1].URLSealed)
		require.Equal(t, "secret", resealed[1].SecretSealed)

		fire := func(now time.Time) (*store.Alert, bool) {
			fired, err := s.AlertFire(ctx, []*store.AlertFireParams{{Rule: "host_offline", Key: "host:" + b.host.ID, HostID: b.host.ID,
				Summary: "offline", Payload: payloadOf, Now: now}})
			require.NoError(t, err)
			require.Len(t, fired, 1)
			return fired[0], fired[0] != nil
		}
		a, ok := fire(base)
		require.True(t, ok)
		require.Equal(t, base, a.StartedAt)
		_, ok = fire(base.Add(time.Second))
		require.False(t, ok, "firing already: one notification per transition")

		due := func(now time.Time) []*store.AlertNotification {
			ns, err := s.AlertOutboxDue(ctx, &store.AlertOutboxDueParams{Now: now})
			require.NoError(t, err)
			return ns
		}
		ns := due(base)
		require.Len(t, ns, 2, "one per sink")
		require.Equal(t, "s_a", ns[0].Sink.ID)
		require.JSONEq(t, `{"id": `+itoa(a.ID)+`, "rule": "host_offline"}`, string(ns[0].Payload))

		// s_a takes it; s_b fails and is due later.
		require.NoError(t, s.AlertOutboxSent(ctx, &store.AlertOutboxSentParams{ID: ns[0].ID, SinkID: "s_a", Now: base}))
		require.NoError(t, s.AlertOutboxFailed(ctx, &store.AlertOutboxFailedParams{ID: ns[1].ID, SinkID: "s_b", Error: "503", NextAt: base.Add(time.Minute), Now: base}))
		require.Empty(t, due(base.Add(59*time.Second)))
		ns = due(base.Add(time.Minute))
		require.Len(t, ns, 1)
		require.Equal(t, 1, ns[0].Attempts)
		sinks, err := s.AlertSinkList(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), sinks[0].Sent)
		require.Equal(t, int64(1), sinks[1].Failures)
		require.Equal(t, "503", sinks[1].LastError)
		require.Equal(t, base, *sinks[1].FailingSince)
		require.Equal(t, 1, sinks[1].Queued)

		// Remind is guarded on the last send the caller saw.
		notice := func(f func(context.Context, []*store.AlertNoticeParams) ([]bool, error), p *store.AlertNoticeParams) bool {
			done, err := f(ctx, []*store.AlertNoticeParams{p})
			require.NoError(t, err)
			require.Len(t, done, 1)
			return done[0]
		}
		require.True(t, notice(s.AlertRemind, &store.AlertNoticeParams{ID: a.ID, LastSentAt: base, Payload: []byte(`{}`), Now: base.Add(time.Hour)}))
		require.False(t, notice(s.AlertRemind, &store.AlertNoticeParams{ID: a.ID, LastSentAt: base, Payload: []byte(`{}`), Now: base.Add(time.Hour)}),
			"reminded already")
		ns = due(base.Add(time.Hour))
		require.Len(t, ns, 2, "each sink's head")
		require.Equal(t, "s_b", ns[0].Sink.ID, "oldest first")
		require.Equal(t, 1, ns[0].Attempts, "s_b's first notification before its second")

		require.True(t, notice(s.AlertResolve, &store.AlertNoticeParams{ID: a.ID, Payload: []byte(`{}`), Now: base.Add(2 * time.Hour)}))
		require.False(t, notice(s.AlertResolve, &store.AlertNoticeParams{ID: a.ID, Payload: []byte(`{}`), Now: base.Add(2 * time.Hour)}))

		// A new episode fires again.
		a2, ok := fire(base.Add(3 * time.Hour))
		require.True(t, ok)
		firing, err := s.AlertList(ctx, &store.AlertListParams{Firing: true})
		require.NoError(t, err)
		require.Len(t, firing, 1)
		require.Equal(t, a2.ID, firing[0].ID)
		all, err := s.AlertList(ctx, &store.AlertListParams{})
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, base.Add(2*time.Hour), *all[1].ResolvedAt)
		page, err := s.AlertList(ctx, &store.AlertListParams{BeforeID: a2.ID})
		require.NoError(t, err)
		require.Len(t, page, 1)

		// Deleting a sink drops what it had queued.
		require.NoError(t, s.AlertSinkDelete(ctx, "s_b"))
		require.ErrorIs(t, s.AlertSinkDelete(ctx, "s_b"), store.ErrNotFound)
		for _, n := range due(base.Add(4 * time.Hour)) {
			require.Equal(t, "s_a", n.Sink.ID)
		}
	})

	t.Run("AlertRules", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		require.NoError(t, s.AlertRuleSet(ctx, &store.AlertRuleSetting{HostID: b.host.ID, Rule: "oldest_pending", Threshold: 60000}))
		require.NoError(t, s.AlertRuleSet(ctx, &store.AlertRuleSetting{Rule: "host_offline", Disabled: true}))
		require.NoError(t, s.AlertRuleSet(ctx, &store.AlertRuleSetting{HostID: b.host.ID, Rule: "oldest_pending", Threshold: 120000}))
		rs, err := s.AlertRuleList(ctx)
		require.NoError(t, err)
		require.Equal(t, []*store.AlertRuleSetting{
			{Rule: "host_offline", Disabled: true},
			{HostID: b.host.ID, Rule: "oldest_pending", Threshold: 120000},
		}, rs)
		require.NoError(t, s.AlertRuleDelete(ctx, "", "host_offline"))
		rs, err = s.AlertRuleList(ctx)
		require.NoError(t, err)
		require.Len(t, rs, 1)
	})

	t.Run("Intake5xx", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		sum := func(since time.Time) int64 {
			n, err := s.Intake5xxSum(ctx, &store.Intake5xxSumParams{Since: since})
			require.NoError(t, err)
			return n
		}
		add := func(replica string, n int64, at time.Time) {
			require.NoError(t, s.Intake5xxAdd(ctx, &store.Intake5xxAddParams{Replica: replica, N: n, Now: at, PruneBefore: at.Add(-time.Hour)}))
		}
		require.Zero(t, sum(base.Add(-time.Hour)), "none")
		add("a", 2, base.Add(5*time.Second))
		add("a", 3, base.Add(50*time.Second)) // the same minute: added up
		add("b", 4, base.Add(30*time.Second))
		add("b", 1, base.Add(70*time.Second)) // the next minute
		require.Equal(t, int64(10), sum(base))
		require.Equal(t, int64(10), sum(base.Add(-time.Minute)))
		require.Equal(t, int64(1), sum(base.Add(time.Minute)), "the minutes starting at or after Since")
		require.Zero(t, sum(base.Add(2*time.Minute)))

		// A write an hour later prunes every replica's older minutes.
		add("c", 1, base.Add(time.Hour+30*time.Second))
		require.Equal(t, int64(2), sum(base.Add(-time.Hour)), "base's minute pruned, the next kept")
		add("c", 1, base.Add(2*time.Hour+time.Minute))
		require.Equal(t, int64(1), sum(base.Add(-time.Hour)), "pruned before the hour up to the write")
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
