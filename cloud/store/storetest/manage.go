package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseManage covers what operators and background upkeep do: retry
// schedules per source and per delivery, manual retries, DLQ purges,
// retention pruning, claim-code expiry, host updates and counts.
func exerciseManage(ctx context.Context, t *testing.T, setup setupFunc) {
	exerciseSchedules(ctx, t, setup)
	exerciseRetry(ctx, t, setup)
	exercisePurgeAndPrune(ctx, t, setup)
	exerciseHostUpkeep(ctx, t, setup)
	exerciseListen(ctx, t, setup)
	exerciseSockets(ctx, t, setup)

	t.Run("LeaseMore", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for i := range 3 {
			insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{body: []byte("0123456789")})
		}
		now := base.Add(time.Minute)
		res := leaseMore(ctx, t, s, b.host.ID, 1, 0, now)
		require.Len(t, res.Deliveries, 1)
		require.True(t, res.More, "count bound with two left")
		res = leaseMore(ctx, t, s, b.host.ID, 5, 10, now)
		require.Len(t, res.Deliveries, 1)
		require.True(t, res.More, "byte bound with one left")
		res = leaseMore(ctx, t, s, b.host.ID, 1, 0, now)
		require.Len(t, res.Deliveries, 1)
		require.False(t, res.More, "the last one fits exactly")
		res = leaseMore(ctx, t, s, b.host.ID, 1, 0, now)
		require.Empty(t, res.Deliveries)
		require.False(t, res.More)

		// A retry that is not due yet is not work left over.
		d := insert(ctx, t, s, b.host.ID, "evt-r", base, deliveryOpts{source: "stripe"})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, now), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Retryable: true}))
		insert(ctx, t, s, b.host.ID, "evt-4", now, deliveryOpts{})
		res = leaseMore(ctx, t, s, b.host.ID, 1, 0, now)
		require.Len(t, res.Deliveries, 1)
		require.False(t, res.More)
	})

	t.Run("AckAfterReLease", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := handOutOne(ctx, t, s, b.host.ID, "evt-1", base)
		late := base.Add(leaseFor + time.Second)
		require.Equal(t, 1, expire(ctx, t, s, delivery.RetryPolicy{}, late))
		again := late.Add(delivery.DefaultRetryPolicy.Delays[1])
		leased := lease(ctx, t, s, b.host.ID, 1, 0, again)
		require.Len(t, leased, 1)
		require.Equal(t, 2, leased[0].Attempts, "handed out again")

		// The ack of the first attempt arrives now: the handler succeeded.
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, again.Add(time.Second), d.ID))
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusAcked, got.Status)
		require.Nil(t, got.LeaseExpiresAt)
		// The second attempt's ack, or its nack, changes nothing more.
		require.Zero(t, ack(ctx, t, s, b.host.ID, again.Add(2*time.Second), d.ID))
		require.Zero(t, nack(ctx, t, s, b.host.ID, again.Add(2*time.Second), delivery.Nack{ID: d.ID, Retryable: false}))
		require.Zero(t, expire(ctx, t, s, delivery.RetryPolicy{}, again.Add(time.Hour)), "an acked delivery has no lease left to expire")
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, d.ID).Status)
	})

	t.Run("ExpireConcurrently", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const total, workers = 300, 4
		for i := range total {
			insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%03d", i), base.Add(time.Duration(i)*time.Millisecond), deliveryOpts{})
		}
		require.Len(t, handOut(ctx, t, s, b.host.ID, total, 0, base), total)

		// Every replica sweeps at once: each expired lease is one failed
		// attempt, counted once.
		now := base.Add(leaseFor + time.Second)
		var mu sync.Mutex
		var wg sync.WaitGroup
		expired := 0
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for {
					n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.RetryPolicy{}, 7, now))
					if err != nil {
						errs <- err
						return
					}
					if n == 0 {
						return
					}
					mu.Lock()
					expired += n
					mu.Unlock()
				}
			})
		}
		waitNoErrors(t, &wg, errs)
		require.Equal(t, total, expired)
		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, total, counts[store.StatusRetrying])
		for i := range 10 {
			id := deliveryID("github", fmt.Sprintf("evt-%03d", i*29), base.Add(time.Duration(i*29)*time.Millisecond))
			require.Len(t, events(ctx, t, s, id), 4, "received, leased, written, expired once")
			require.Equal(t, 1, get(ctx, t, s, b.host.ID, id).Attempts)
		}
	})
}

// exerciseSchedules covers retry schedules.
func exerciseSchedules(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("SourceRetrySchedule", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		delays := []time.Duration{0, 1500 * time.Millisecond, time.Minute}
		src, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{
			HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true,
			RetryDelays: delays, MaxAttempts: 7, Now: base,
		})
		require.NoError(t, err)
		require.Equal(t, delays, src.RetryDelays)
		require.Equal(t, 7, src.MaxAttempts)
		got, err := s.SourceGet(ctx, b.host.ID, "github")
		require.NoError(t, err)
		require.Equal(t, src, got)

		// Replacing without a schedule goes back to the default policy.
		src, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{
			HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true, RetryDelays: []time.Duration{}, Now: base,
		})
		require.NoError(t, err)
		require.Nil(t, src.RetryDelays)
		require.Zero(t, src.MaxAttempts)
		list, err := s.SourceList(ctx, b.host.ID)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Nil(t, list[0].RetryDelays)
	})

	t.Run("DeliveryOwnSchedule", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		own := []time.Duration{0, 10 * time.Second, 20 * time.Second}
		p := insertParams(b.host.ID, "evt-1", base, deliveryOpts{})
		p.RetryDelays = own
		res, err := s.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		d := res.Delivery
		require.Equal(t, own, d.RetryDelays, "snapshotted")
		require.Equal(t, 3, d.MaxAttempts, "one attempt per entry")

		// Nacks follow the delivery's schedule, whatever the fallback says.
		now := base
		for attempt := 1; attempt <= 3; attempt++ {
			require.Equal(t, []string{d.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, now)), "attempt %d", attempt)
			require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: "503", Retryable: true}))
			got := get(ctx, t, s, b.host.ID, d.ID)
			if attempt == 3 {
				require.Equal(t, store.StatusDLQ, got.Status, "after its third failure")
				break
			}
			require.Equal(t, ptr(now.Add(own[attempt])), got.NextRetryAt, "attempt %d", attempt)
			now = *got.NextRetryAt
		}

		// Lease expiry follows it too.
		p = insertParams(b.host.ID, "evt-2", base, deliveryOpts{})
		p.RetryDelays = []time.Duration{0, 7 * time.Second}
		p.MaxAttempts = 4
		res, err = s.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, 4, res.Delivery.MaxAttempts, "an explicit max wins")
		require.Len(t, handOut(ctx, t, s, b.host.ID, 10, 0, base), 1)
		late := base.Add(leaseFor + time.Second)
		require.Equal(t, 1, expire(ctx, t, s, delivery.DefaultRetryPolicy, late))
		require.Equal(t, ptr(late.Add(7*time.Second)), get(ctx, t, s, b.host.ID, res.Delivery.ID).NextRetryAt)

		// Without a schedule: the fallback policy of the call.
		plain := insert(ctx, t, s, b.host.ID, "evt-3", base, deliveryOpts{})
		require.Nil(t, plain.RetryDelays)
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, late), 1)
		fallback := delivery.RetryPolicy{Delays: []time.Duration{0, 3 * time.Second}}
		_, err = s.DeliveryNack(ctx, delivery.NackParams(b.host.ID, []delivery.Nack{{ID: plain.ID, Retryable: true}}, fallback, late))
		require.NoError(t, err)
		require.Equal(t, ptr(late.Add(3*time.Second)), get(ctx, t, s, b.host.ID, plain.ID).NextRetryAt)
	})

	t.Run("ReceiveNote", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		p := insertParams(b.host.ID, "evt-1", base, deliveryOpts{})
		p.ReceiveNote = "over the host's rate limit"
		res, err := s.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		ev := lastEvent(ctx, t, s, res.Delivery.ID)
		require.Equal(t, "received (over the host's rate limit)", ev.Reason)
		require.Equal(t, store.StatusQueued, ev.To)
	})
}

// exerciseRetry covers manual retries.
func exerciseRetry(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		dead := toDLQ(ctx, t, s, b.host.ID, "evt-dlq", base)
		now := base.Add(time.Hour)
		d, err := s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: dead.ID, Now: now})
		require.NoError(t, err)
		require.Equal(t, store.StatusQueued, d.Status)
		require.Zero(t, d.Attempts, "attempts reset")
		require.Nil(t, d.DLQAt)
		require.Nil(t, d.NextRetryAt)
		require.Equal(t, now, d.UpdatedAt)
		require.Equal(t, d, func() *store.Delivery { g := get(ctx, t, s, b.host.ID, dead.ID); g.RawBody = nil; return g }())
		requireRequeued(ctx, t, s, b.host.ID, dead.ID, store.TransitionRetry, now)

		// A retrying delivery waits no longer.
		waiting := insert(ctx, t, s, b.host.ID, "evt-wait", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, now), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: waiting.ID, Retryable: true}))
		_, err = s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: waiting.ID, Now: now})
		require.NoError(t, err)
		require.Equal(t, []string{waiting.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, now)), "due at once")
	})

	t.Run("RetryRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Hour), deliveryOpts{})
		leased := leaseOne(ctx, t, s, b.host.ID, "evt-leased", base)
		acked := insert(ctx, t, s, b.host.ID, "evt-acked", base.Add(time.Second), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base, acked.ID))
		dead := toDLQ(ctx, t, s, b.host.ID, "evt-dlq", base.Add(2*time.Second))

		for _, d := range []*store.Delivery{queued, leased, acked} {
			before := get(ctx, t, s, b.host.ID, d.ID)
			trail := len(events(ctx, t, s, d.ID))
			_, err := s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: d.ID, Now: base.Add(time.Hour)})
			require.ErrorIs(t, err, store.ErrConflict, d.ID)
			var te *store.TransitionError
			require.True(t, errors.As(err, &te), d.ID)
			require.Equal(t, before.Status, te.Status, d.ID)
			require.Equal(t, before, get(ctx, t, s, b.host.ID, d.ID), "unchanged: %s", d.ID)
			require.Len(t, events(ctx, t, s, d.ID), trail, d.ID)
		}
		_, err := s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.host.ID, ID: "nope", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: b.other.ID, ID: dead.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "another host's delivery")
		require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.host.ID, dead.ID).Status)
	})
}

// exercisePurgeAndPrune covers DLQ purges and retention pruning.
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
		insert(ctx, t, s, b.host.ID, "evt-dlq-0", base.Add(2*time.Hour), deliveryOpts{})
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

// exerciseHostUpkeep covers hosts' claim-code expiry, updates and counts.
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

		list, err := s.HostListWithCounts(ctx, &store.HostPageParams{})
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

		// A page at a time, each after the last one's (created_at, id):
		// the same hosts with the same counts. Two hosts created in the
		// same millisecond are told apart by id.
		createHost(ctx, t, s, "host-b2", base.Add(time.Second))
		all, err := s.HostListWithCounts(ctx, &store.HostPageParams{})
		require.NoError(t, err)
		require.Len(t, all, 4)
		var paged []*store.HostWithCounts
		p := &store.HostPageParams{Limit: 1}
		for range 10 {
			page, err := s.HostListWithCounts(ctx, p)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			require.Len(t, page, 1)
			paged = append(paged, page...)
			last := page[len(page)-1].Host
			p = &store.HostPageParams{Limit: 1, AfterCreatedAt: &last.CreatedAt, AfterID: last.ID}
		}
		require.Equal(t, all, paged)
		page, err := s.HostListWithCounts(ctx, &store.HostPageParams{Limit: 3})
		require.NoError(t, err)
		require.Equal(t, all[:3], page)
		last := all[1].Host
		page, err = s.HostListWithCounts(ctx, &store.HostPageParams{Limit: 5, AfterCreatedAt: &last.CreatedAt, AfterID: last.ID})
		require.NoError(t, err)
		require.Equal(t, all[2:], page)
	})

	// A presence filter keeps the active, claimed hosts last heard from
	// (else claimed) within its cuts, a page at a time.
	t.Run("HostListByPresence", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		now := base.Add(time.Hour)
		lateCut, offlineCut := now.Add(-time.Minute), now.Add(-3*time.Minute)
		hosts := map[string]time.Time{ // each claimed at base, last heard from at
			"p-online": lateCut, "p-online2": now, "p-late": lateCut.Add(-time.Millisecond), "p-late2": offlineCut,
			"p-offline": offlineCut.Add(-time.Millisecond), "p-gone": now,
		}
		for _, id := range []string{"p-online", "p-late", "p-offline", "p-online2", "p-late2", "p-gone"} {
			h := createHost(ctx, t, s, id, base)
			claim(ctx, t, s, h, base)
			require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: id, Now: hosts[id]}))
		}
		fresh := createHost(ctx, t, s, "p-fresh", base)
		claim(ctx, t, s, fresh, now) // claimed, never heard from: from its claim
		never := createHost(ctx, t, s, "p-never", base)
		claim(ctx, t, s, never, base)
		createHost(ctx, t, s, "p-unclaimed", base.Add(time.Second))
		_, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: "p-gone", Now: now})
		require.NoError(t, err)

		ids := func(presence store.Presence, limit int) (out []string) {
			t.Helper()
			p := &store.HostPageParams{Limit: limit, Presence: presence, LateCut: lateCut, OfflineCut: offlineCut}
			for range 20 {
				page, err := s.HostListWithCounts(ctx, p)
				require.NoError(t, err)
				for _, h := range page {
					out = append(out, h.Host.ID)
					require.Len(t, h.Counts, len(store.Statuses))
				}
				if limit == 0 || len(page) < limit {
					return out
				}
				last := page[len(page)-1].Host
				p = &store.HostPageParams{Limit: limit, AfterCreatedAt: &last.CreatedAt, AfterID: last.ID, Presence: presence,
					LateCut: lateCut, OfflineCut: offlineCut}
			}
			t.Fatal("no last page")
			return nil
		}
		for _, limit := range []int{0, 1, 2} {
			require.ElementsMatch(t, []string{"p-online", "p-online2", "p-fresh"}, ids(store.PresenceOnline, limit), "limit %d", limit)
			require.ElementsMatch(t, []string{"p-late", "p-late2"}, ids(store.PresenceLate, limit), "limit %d", limit)
			require.ElementsMatch(t, []string{"p-offline", "p-never"}, ids(store.PresenceOffline, limit), "limit %d", limit)
		}
		require.Empty(t, ids("gone", 0))
	})

	// The counts are kept as deliveries change (an engine may record the
	// changes and fold them in later): the same whether or not they have
	// been folded, through inserts, transitions and deletions.
	t.Run("DeliveryCountFold", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for i := range 4 {
			insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{})
		}
		leased := lease(ctx, t, s, b.host.ID, 3, 0, base)
		require.Equal(t, 2, ack(ctx, t, s, b.host.ID, base, leased[0].ID, leased[1].ID))
		toDLQ(ctx, t, s, b.other.ID, "evt-o", base)
		counts := func(hostID string) map[store.Status]int {
			t.Helper()
			c, err := s.DeliveryCountByStatus(ctx, hostID)
			require.NoError(t, err)
			return c
		}
		want := func(n map[store.Status]int) map[store.Status]int {
			c := map[store.Status]int{}
			for _, st := range store.Statuses {
				c[st] = n[st]
			}
			return c
		}
		hostCounts := want(map[store.Status]int{store.StatusQueued: 1, store.StatusDelivering: 1, store.StatusAcked: 2})
		check := func(otherDLQ int) {
			t.Helper()
			require.Equal(t, hostCounts, counts(b.host.ID))
			require.Equal(t, want(map[store.Status]int{store.StatusDLQ: otherDLQ}), counts(b.other.ID))
			list, err := s.HostListWithCounts(ctx, &store.HostPageParams{})
			require.NoError(t, err)
			for _, hc := range list {
				require.Equal(t, counts(hc.Host.ID), hc.Counts, hc.Host.ID)
			}
		}
		fold := func(limit int) int {
			t.Helper()
			n, err := s.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{Limit: limit})
			require.NoError(t, err)
			return n
		}
		check(1)
		fold(1)
		check(1)
		fold(0)
		check(1)
		n, err := s.DeliveryPurgeDLQ(ctx, &store.DeliveryPurgeDLQParams{HostID: b.other.ID})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		check(0)
		fold(0)
		check(0)
		require.Zero(t, fold(0), "every change folded")
		require.Equal(t, want(nil), counts("nope"))
	})
}
