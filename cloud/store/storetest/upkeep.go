package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// --- purge and retention ---

func exercisePurgeAndPrune(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("PurgeDLQ", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var dead []*store.Delivery
		for i := range 3 {
			dead = append(dead, toDLQ(ctx, t, s, b.host.ID, fmt.Sprintf("evt-dlq-%d", i), base.Add(time.Duration(i)*time.Second)))
		}
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Hour), deliveryOpts{})
		otherDead := toDLQ(ctx, t, s, b.other.ID, "evt-other", base)

		purge := func(limit int) int {
			n, err := s.DeliveryPurgeDLQ(ctx, &store.DeliveryPurgeDLQParams{HostID: b.host.ID, Limit: limit})
			require.NoError(t, err)
			return n
		}
		require.Equal(t, 2, purge(2), "bounded")
		require.Equal(t, 1, purge(0))
		require.Zero(t, purge(0))
		for _, d := range dead {
			_, err := s.DeliveryGet(ctx, b.host.ID, d.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			require.Empty(t, events(ctx, t, s, d.ID), "the trail goes with it")
		}
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, queued.ID).Status)
		require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.other.ID, otherDead.ID).Status, "other hosts keep theirs")

		// The provider's repeat of a purged event is new work.
		res, err := s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-dlq-0", base.Add(2*time.Hour), deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, store.InsertQueued, res.Outcome)
	})

	t.Run("Prune", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Acked at base+1s, +2s, +3s; dead-lettered at base+1s, +2s.
		var acked, dead []*store.Delivery
		for i := 1; i <= 3; i++ {
			at := base.Add(time.Duration(i) * time.Second)
			d := insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-acked-%d", i), at, deliveryOpts{})
			require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, at), 1)
			require.Equal(t, 1, ack(ctx, t, s, b.host.ID, at, d.ID))
			acked = append(acked, d)
		}
		for i := 1; i <= 2; i++ {
			dead = append(dead, toDLQ(ctx, t, s, b.other.ID, fmt.Sprintf("evt-dlq-%d", i), base.Add(time.Duration(i)*time.Second)))
		}
		// Two live deliveries: the first leased and nacked into retrying, the
		// second left queued.
		retrying := insert(ctx, t, s, b.host.ID, "evt-retrying", base, deliveryOpts{})
		insert(ctx, t, s, b.host.ID, "evt-queued", base, deliveryOpts{source: "stripe"})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: retrying.ID, Retryable: true}))

		prune := func(st store.Status, before time.Time, limit int) int {
			n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: st, PruneParams: store.PruneParams{Before: before, Limit: limit}})
			require.NoError(t, err)
			return n
		}
		cut := base.Add(3 * time.Second)
		require.Equal(t, 1, prune(store.StatusAcked, cut, 1), "bounded, oldest first")
		_, err := s.DeliveryGet(ctx, b.host.ID, acked[0].ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Empty(t, events(ctx, t, s, acked[0].ID))
		require.Equal(t, 1, prune(store.StatusAcked, cut, 0))
		require.Zero(t, prune(store.StatusAcked, cut, 0), "changed at the cut: kept")
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, acked[2].ID).Status)

		require.Equal(t, 2, prune(store.StatusDLQ, cut, 0))
		for _, d := range dead {
			_, err := s.DeliveryGet(ctx, b.other.ID, d.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
		}
		// Far in the future, only finished deliveries go.
		far := base.Add(365 * 24 * time.Hour)
		require.Equal(t, 1, prune(store.StatusAcked, far, 0))
		require.Zero(t, prune(store.StatusDLQ, far, 0))
		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, 1, counts[store.StatusQueued])
		require.Equal(t, 1, counts[store.StatusRetrying])

		for _, st := range []store.Status{store.StatusQueued, store.StatusDelivering, store.StatusRetrying} {
			_, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: st, PruneParams: store.PruneParams{Before: far}})
			require.Error(t, err, "%s is not prunable", st)
		}
		counts, err = s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, 2, counts[store.StatusQueued]+counts[store.StatusRetrying])
	})
}

// --- hosts: claim-code expiry, updates, counts ---

func exerciseHostUpkeep(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("HostExpireClaimCodes", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// host-a and host-b: codes until base+24h. host-c: until base+1h.
		createHost(ctx, t, s, "host-c", base.Add(-23*time.Hour))
		_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-b"), CredentialHash: hashOf("cred"), Now: base})
		require.NoError(t, err)

		expire := func(now time.Time, limit int) int {
			n, err := s.HostExpireClaimCodes(ctx, &store.HostExpireClaimCodesParams{Limit: limit, Now: now})
			require.NoError(t, err)
			return n
		}
		require.Zero(t, expire(base.Add(time.Hour-time.Millisecond), 0), "not yet")
		require.Equal(t, 1, expire(base.Add(time.Hour), 0), "expired at that instant")
		c, err := s.HostGet(ctx, "host-c")
		require.NoError(t, err)
		require.Nil(t, c.ClaimCodeHash)
		require.Nil(t, c.ClaimExpiresAt)
		require.Equal(t, int64(1), c.Generation, "nothing else changes")
		require.Zero(t, expire(base.Add(2*time.Hour), 0))

		a, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host, a, "an unexpired code stays")
		require.Equal(t, 1, expire(base.Add(48*time.Hour), 0), "host-a's; host-b's was used")
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("c"), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "a cleared code claims nothing")

		for i := range 3 {
			createHost(ctx, t, s, fmt.Sprintf("host-x%d", i), base)
		}
		require.Equal(t, 2, expire(base.Add(48*time.Hour), 2), "bounded")
		require.Equal(t, 1, expire(base.Add(48*time.Hour), 2))
	})

	t.Run("HostUpdate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		h, err := s.HostUpdate(ctx, &store.HostUpdateParams{HostID: b.host.ID, Name: ptr("renamed")})
		require.NoError(t, err)
		want := *b.host
		want.Name = "renamed"
		require.Equal(t, &want, h, "only the name changes")

		h, err = s.HostUpdate(ctx, &store.HostUpdateParams{HostID: b.host.ID, RateLimitPerMin: ptr(600), RateLimitBurst: ptr(50)})
		require.NoError(t, err)
		want.RateLimitPerMin, want.RateLimitBurst = 600, 50
		require.Equal(t, &want, h)

		h, err = s.HostUpdate(ctx, &store.HostUpdateParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Equal(t, &want, h, "nothing to change")
		got, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, &want, got)

		other, err := s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, b.other, other)

		_, err = s.HostUpdate(ctx, &store.HostUpdateParams{HostID: "nope", Name: ptr("x")})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostListWithCounts", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createHost(ctx, t, s, "host-c", base.Add(time.Second))
		for i := range 4 {
			insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{})
		}
		require.Len(t, lease(ctx, t, s, b.host.ID, 2, 0, base), 2)
		toDLQ(ctx, t, s, b.other.ID, "evt-o", base)

		list, err := s.HostListWithCounts(ctx)
		require.NoError(t, err)
		require.Len(t, list, 3)
		hosts, err := s.HostList(ctx)
		require.NoError(t, err)
		for i, hc := range list {
			require.Equal(t, hosts[i], hc.Host, "same hosts, same order")
			want, err := s.DeliveryCountByStatus(ctx, hc.Host.ID)
			require.NoError(t, err)
			require.Equal(t, want, hc.Counts, hc.Host.ID)
		}
		require.Equal(t, 2, list[0].Counts[store.StatusQueued])
		require.Equal(t, 2, list[0].Counts[store.StatusDelivering])
		require.Equal(t, 1, list[1].Counts[store.StatusDLQ])
		require.Len(t, list[2].Counts, len(store.Statuses), "a host without deliveries counts zeros")
	})
}

// exerciseListen covers the wake-ups of waiting heartbeats.
