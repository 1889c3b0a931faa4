package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// exerciseBatch: DeliveryInsertBatch answers each insert as if it had been
// made alone, in order; GroupCommit gathers concurrent inserts into such
// batches without changing a single answer.
func exerciseBatch(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("InsertBatchMixed", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		old := insert(ctx, t, s, b.host.ID, "evt-old", base, deliveryOpts{})
		dead := toDLQ(ctx, t, s, b.host.ID, "evt-dead", base)
		at := base.Add(time.Minute)
		ps := []*store.DeliveryInsertParams{
			insertParams(b.host.ID, "evt-new", at, deliveryOpts{}),
			insertParams(b.host.ID, "evt-old", at, deliveryOpts{}),  // stored before: duplicate
			insertParams(b.host.ID, "evt-dead", at, deliveryOpts{}), // dead-lettered: revived
			// The same event for another host: its own delivery (arriving
			// another millisecond: delivery ids are source:event:ms).
			insertParams(b.other.ID, "evt-new", at.Add(2*time.Millisecond), deliveryOpts{}),
			insertParams(b.host.ID, "evt-new", at.Add(time.Millisecond), deliveryOpts{}),  // repeat in the batch
			insertParams(b.host.ID, "evt-dead", at.Add(time.Millisecond), deliveryOpts{}), // revived just before
			insertParams(b.host.ID, "evt-a", at, deliveryOpts{source: "stripe"}),
		}
		res, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(t, err)
		require.Len(t, res, len(ps))
		want := []store.InsertOutcome{store.InsertQueued, store.InsertDuplicate, store.InsertRevived,
			store.InsertQueued, store.InsertDuplicate, store.InsertDuplicate, store.InsertQueued}
		for i, r := range res {
			require.Equal(t, want[i], r.Outcome, "insert %d (%s)", i, ps[i].EventID)
		}
		require.Equal(t, ps[0].ID, res[0].Delivery.ID)
		require.Equal(t, old.ID, res[1].Delivery.ID)
		require.Equal(t, dead.ID, res[2].Delivery.ID)
		require.Equal(t, store.StatusQueued, res[2].Delivery.Status)
		require.Equal(t, b.other.ID, res[3].Delivery.HostID)
		require.Equal(t, res[0].Delivery.ID, res[4].Delivery.ID, "the repeat names the first")
		require.Equal(t, dead.ID, res[5].Delivery.ID)
		require.Equal(t, "stripe", res[6].Delivery.Source)

		d := get(ctx, t, s, b.host.ID, res[0].Delivery.ID)
		require.Equal(t, ps[0].RawBody, d.RawBody, "stored with its body")
		require.Equal(t, ps[0].Headers, d.Headers)
		require.Len(t, events(ctx, t, s, res[0].Delivery.ID), 1, "one received event")
		require.Equal(t, store.TransitionRevive.Reason, lastEvent(ctx, t, s, dead.ID).Reason)
		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, 3, counts[store.StatusQueued], "dead (revived), new, stripe; evt-old was leased with evt-dead")
	})

	t.Run("InsertBatchIDTaken", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		third := createHost(ctx, t, s, "host-3", base)
		stored := insert(ctx, t, s, b.other.ID, "evt-stored", base, deliveryOpts{})
		// One event to three hosts in one millisecond, in one batch, and
		// one whose id a stored delivery of another host has.
		ps := []*store.DeliveryInsertParams{
			insertParams(third.ID, "evt-1", base, deliveryOpts{}),
			insertParams(b.host.ID, "evt-1", base, deliveryOpts{}),
			insertParams(b.other.ID, "evt-1", base, deliveryOpts{}),
			insertParams(b.host.ID, "evt-1", base, deliveryOpts{}), // the provider's repeat
			insertParams(b.host.ID, "evt-stored", base, deliveryOpts{}),
		}
		res, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(t, err)
		want := []store.InsertOutcome{store.InsertQueued, store.InsertQueued, store.InsertQueued,
			store.InsertDuplicate, store.InsertQueued}
		seen := map[string]string{stored.ID: b.other.ID}
		for i, r := range res {
			require.Equal(t, want[i], r.Outcome, "insert %d", i)
			require.Equal(t, ps[i].HostID, r.Delivery.HostID)
			if r.Outcome == store.InsertQueued {
				require.NotContains(t, seen, r.Delivery.ID, "insert %d: ids are unique", i)
				seen[r.Delivery.ID] = r.Delivery.HostID
			}
			got := get(ctx, t, s, r.Delivery.HostID, r.Delivery.ID)
			require.Equal(t, ps[i].EventID, got.EventID)
			require.Equal(t, r.Delivery.ReceivedAt, got.ReceivedAt)
			require.Equal(t, ps[i].RawBody, got.RawBody)
			require.Len(t, events(ctx, t, s, r.Delivery.ID), 1, "one received event")
		}
		require.Equal(t, res[1].Delivery.ID, res[3].Delivery.ID, "the repeat names the first")
		require.Equal(t, deliveryID("github", "evt-stored", base.Add(time.Millisecond)), res[4].Delivery.ID)
		require.Equal(t, deliveryID("github", "evt-stored", base), get(ctx, t, s, b.other.ID, stored.ID).ID,
			"the stored delivery is untouched")
	})

	t.Run("InsertBatchFailsWhole", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.DeliveryInsertBatch(ctx, []*store.DeliveryInsertParams{
			insertParams(b.host.ID, "evt-1", base, deliveryOpts{}),
			insertParams("h_nosuchhost", "evt-2", base, deliveryOpts{}),
		})
		require.ErrorIs(t, err, store.ErrNotFound, "an unknown host")
		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Zero(t, counts[store.StatusQueued], "nothing of a failed batch is stored")
	})

	t.Run("GroupCommit", func(t *testing.T) {
		t.Parallel()
		raw, b := setup(t)
		batches := make(chan int, 10000)
		s := store.GroupCommit(raw, store.GroupOptions{MaxBatch: 16, Flushers: 2,
			Observe: func(n int, _ time.Duration) { batches <- n }})
		// 32 senders, each event sent by 4 of them, and now and then an
		// insert that cannot be stored (an unknown host): it fails alone.
		const senders, nEvents, poison = 32, 200, "h_nosuchhost"
		type answer struct {
			event string
			res   *store.DeliveryInsertResult
			err   error
		}
		answers := make(chan answer, senders*nEvents)
		var wg sync.WaitGroup
		for w := range senders {
			wg.Go(func() {
				for e := w % 4; e < nEvents; e += 4 {
					host := b.host.ID
					if w == 3 && e%50 == 7 { // evt-7 and evt-107, sent by others too

						host = poison
					}
					at := base.Add(time.Duration(w) * time.Millisecond)
					res, err := s.DeliveryInsert(ctx, insertParams(host, fmt.Sprintf("evt-%d", e), at, deliveryOpts{}))
					answers <- answer{event: fmt.Sprintf("%s/evt-%d", host, e), res: res, err: err}
				}
			})
		}
		wg.Wait()
		close(answers)
		stored := map[string]string{}
		queued := map[string]int{}
		for a := range answers {
			if a.err != nil {
				require.ErrorIs(t, a.err, store.ErrNotFound, a.event)
				require.Contains(t, a.event, poison, "only the unknown host's inserts fail")
				continue
			}
			if id, ok := stored[a.event]; ok {
				require.Equal(t, id, a.res.Delivery.ID, "every answer names the one stored delivery")
			}
			stored[a.event] = a.res.Delivery.ID
			if a.res.Outcome == store.InsertQueued {
				queued[a.event]++
			}
		}
		require.Len(t, stored, nEvents)
		for ev, n := range queued {
			require.Equal(t, 1, n, "%s stored once", ev)
		}
		require.Len(t, queued, nEvents)
		close(batches)
		largest := 0
		for n := range batches {
			require.LessOrEqual(t, n, 16)
			largest = max(largest, n)
		}
		require.Greater(t, largest, 1, "concurrent inserts shared a transaction")
		for _, id := range stored {
			require.Len(t, events(ctx, t, raw, id), 1, "one received event")
		}

		// A caller that gave up is not written; a closed store refuses.
		gone, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.DeliveryInsert(gone, insertParams(b.host.ID, "evt-gone", base, deliveryOpts{}))
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, s.Close())
		_, err = s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-late", base, deliveryOpts{}))
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

// exerciseChanged: every change to a host or its sources is told to
// listeners (what caches of them rely on), and nothing else is.
func exerciseChanged(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ListenChanged", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		changed := make(chan string, 100)
		stop := listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(string) {},
			Changed:   func(hostID string) { changed <- hostID },
		})
		next := func(what string) string {
			t.Helper()
			return receive(t, changed, "no change told: "+what)
		}
		// Told in commit order: a mark after an action that tells nothing
		// comes next.
		mark := func() {
			_, err := s.HostUpdate(ctx, &store.HostUpdateParams{HostID: b.other.ID, Name: ptr("mark")})
			require.NoError(t, err)
		}

		_, err := s.HostUpdate(ctx, &store.HostUpdateParams{HostID: b.host.ID, RateLimitPerMin: ptr(5)})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, next("host update"))

		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "billing", Provider: "stripe",
			Enabled: true, Secrets: []store.SealedSecret{{Ciphertext: "c", Fingerprint: "f"}}, Now: base})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, next("source upsert"))
		src, err := s.SourceGet(ctx, b.host.ID, "billing")
		require.NoError(t, err)
		require.NoError(t, s.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{HostID: b.host.ID, Name: "billing",
			Secrets: []store.SealedSecret{{Ciphertext: "d", Fingerprint: "f"}}, UpdatedAt: src.UpdatedAt, Now: base.Add(time.Second)}))
		require.Equal(t, b.host.ID, next("source secrets"))

		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, Now: base}))
		insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		mark()
		require.Equal(t, b.other.ID, next("a plain heartbeat and an insert tell nothing"))
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, Now: base,
			Subscription: []byte(`{"webhooks":{}}`)}))
		require.Equal(t, b.host.ID, next("a new subscription"))

		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: base})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, next("deactivate"))
		h := createHost(ctx, t, s, "host-c", base)
		require.Equal(t, h.ID, next("create"))

		require.NoError(t, stop())
		select {
		case h := <-changed:
			t.Fatalf("told more than the changes: %s", h)
		default:
		}
	})
}
