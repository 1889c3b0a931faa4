package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseDeliveries covers deliveries' insert, get, list and counts.
func exerciseDeliveries(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryInsertGet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := []byte("{\"a\": 1}\n\x00\xff\xfe not utf-8, trailing spaces  ")
		at := base.Add(987654321 * time.Nanosecond)
		p := insertParams(b.host.ID, "evt-1", at, deliveryOpts{body: body})
		res := insertFor(ctx, t, s, p, store.InsertQueued)
		d := res.Delivery
		require.Equal(t, p.ID, d.ID)
		require.Equal(t, store.StatusQueued, d.Status)
		require.Zero(t, d.Attempts)
		require.Equal(t, delivery.DefaultRetryPolicy.MaxAttempts(), d.MaxAttempts, "0 means the default policy's")
		require.Equal(t, len(body), d.BodySize)

		got := get(ctx, t, s, b.host.ID, p.ID)
		require.Equal(t, &store.Delivery{
			ID: p.ID, HostID: b.host.ID, Source: "github", EventID: "evt-1",
			EventType: "pull_request", EventAction: "opened",
			Headers: p.Headers, RawBody: body, BodySize: len(body),
			Status: store.StatusQueued, MaxAttempts: 5,
			ReceivedAt: base.Add(987 * time.Millisecond), CorrelationID: "corr-evt-1",
			UpdatedAt: base.Add(987 * time.Millisecond),
		}, got)
		got.RawBody = nil
		require.Equal(t, got, d, "the insert answers what a read gives, body aside")
		sched := insertParams(b.host.ID, "evt-sched", at, deliveryOpts{})
		sched.RetryDelays, sched.Headers = []time.Duration{0, 1500 * time.Microsecond, time.Minute}, nil
		res, err := s.DeliveryInsert(ctx, sched)
		require.NoError(t, err)
		got = get(ctx, t, s, b.host.ID, sched.ID)
		got.RawBody = nil
		require.Equal(t, got, res.Delivery, "with a schedule kept in milliseconds and no headers")

		evs := events(ctx, t, s, p.ID)
		require.Len(t, evs, 1)
		require.Equal(t, p.ID, evs[0].DeliveryID)
		require.Equal(t, base.Add(987*time.Millisecond), evs[0].At)
		require.Equal(t, store.Status(""), evs[0].From)
		require.Equal(t, store.StatusQueued, evs[0].To)
		require.Equal(t, store.TransitionReceive.Reason, evs[0].Reason)
		require.Zero(t, evs[0].Attempt)

		// Isolation: another host cannot see it.
		_, err = s.DeliveryGet(ctx, b.other.ID, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.DeliveryGet(ctx, b.host.ID, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)

		// An empty body is still a body.
		empty := insert(ctx, t, s, b.host.ID, "evt-empty", base, deliveryOpts{body: []byte{}})
		require.Equal(t, []byte{}, get(ctx, t, s, b.host.ID, empty.ID).RawBody)

		_, err = s.DeliveryInsert(ctx, insertParams("nope", "evt-1", base, deliveryOpts{}))
		require.ErrorIs(t, err, store.ErrNotFound, "unknown host")
	})

	t.Run("DeliveryBodiesAsSent", func(t *testing.T) {
		// However an engine stores a body (compressed or not), each read
		// gives it back byte for byte: one as it is stored, one leased,
		// one read alone, one shared by a fanout's members, inserted one
		// at a time and through the group commit.
		t.Parallel()
		raw, b := setup(t)
		grouped := store.GroupCommit(raw, store.GroupOptions{MaxBatch: 8})
		t.Cleanup(func() { _ = grouped.Close() }) // its flushers; the store's own close follows
		gb := newGroupBed(ctx, t, raw, b)
		bodies := map[string][]byte{
			"json-64k":  bytes.Repeat([]byte(`{"commit":{"id":"4b825dc642cb6eb9a060e54bf8d69288fbee4904","added":["src/a.go"]}},`), 800),
			"random-8k": make([]byte, 8<<10),
			"at-512":    bytes.Repeat([]byte("ab"), 256),
			"binary-2k": append(bytes.Repeat([]byte{0, 0xff, 0xfe, 0}, 500), '\n'),
			"small":     []byte(`{"zen":"Keep it logically awesome."}`),
			"empty":     {},
		}
		_, _ = rand.Read(bodies["random-8k"])
		var sent []*store.DeliveryInsertParams
		n := 0
		for name, body := range bodies {
			for _, via := range []store.Store{raw, grouped} {
				n++
				p := insertParams(b.host.ID, fmt.Sprintf("evt-%s-%d", name, n), base, deliveryOpts{body: body})
				insertFor(ctx, t, via, p, store.InsertQueued)
				sent = append(sent, p)
				require.Equal(t, body, get(ctx, t, raw, b.host.ID, p.ID).RawBody, "%s read alone", name)
			}
			stored := leasedParams(b.host.ID, "evt-leased-"+name, base, deliveryOpts{body: body})
			res := insertFor(ctx, t, grouped, stored, store.InsertQueued)
			require.Equal(t, body, res.Delivery.RawBody, "%s answered by the insert that leased it", name)
			fan := gb.fanoutParams("evt-fan-"+name, base, body)
			_, err := grouped.DeliveryInsertBatch(ctx, fan)
			require.NoError(t, err)
			for i, m := range gb.members {
				require.Equal(t, body, get(ctx, t, raw, m, fan[i].ID).RawBody, "%s fanned out to %s", name, m)
				if m == b.host.ID {
					sent = append(sent, fan[i]) // leased below with the host's own
					continue
				}
				ds := lease(ctx, t, raw, m, 10, 0, base)
				require.Len(t, ds, 1)
				require.Equal(t, body, ds[0].RawBody, "%s leased by %s", name, m)
			}
		}
		ds := lease(ctx, t, raw, b.host.ID, len(sent)+1, 0, base)
		require.Len(t, ds, len(sent))
		for _, d := range ds {
			i := slices.IndexFunc(sent, func(p *store.DeliveryInsertParams) bool { return p.ID == d.ID })
			require.GreaterOrEqual(t, i, 0, d.ID)
			require.Equal(t, sent[i].RawBody, d.RawBody, "%s leased", d.ID)
			require.Equal(t, len(sent[i].RawBody), d.BodySize)
		}
	})

	t.Run("DeliveryInsertDuplicate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})

		// The provider retries: same event id, later receive time, new delivery id.
		res := insertFor(ctx, t, s, insertParams(b.host.ID, "evt-1", base.Add(time.Minute), deliveryOpts{}), store.InsertDuplicate)
		require.Equal(t, first.ID, res.Delivery.ID, "the first delivery is answered")
		require.Equal(t, store.StatusQueued, res.Delivery.Status)

		// Still a duplicate once acked.
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 1)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base, first.ID))
		res = insertFor(ctx, t, s, insertParams(b.host.ID, "evt-1", base.Add(2*time.Minute), deliveryOpts{}), store.InsertDuplicate)
		require.Equal(t, first.ID, res.Delivery.ID)
		require.Equal(t, store.StatusAcked, res.Delivery.Status)

		// The same event id on another source or another host is another delivery.
		insert(ctx, t, s, b.host.ID, "evt-1", base.Add(time.Minute), deliveryOpts{source: "stripe"})
		insert(ctx, t, s, b.other.ID, "evt-1", base.Add(3*time.Minute), deliveryOpts{})

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, 1, counts[store.StatusAcked])
		require.Equal(t, 1, counts[store.StatusQueued])
		require.Len(t, events(ctx, t, s, first.ID), 3, "duplicates leave no trace in the trail")

	})

	t.Run("DeliveryInsertIDTaken", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		third := createHost(ctx, t, s, "host-3", base)
		// The same event to three hosts under one source name, in one
		// millisecond (a fan-out; Stripe and Svix send one event id to every
		// endpoint): one id, three deliveries. Each is stored, the later ones
		// a millisecond on, and each host sees only its own.
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		second := insert(ctx, t, s, b.other.ID, "evt-1", base, deliveryOpts{})
		last := insert(ctx, t, s, third.ID, "evt-1", base, deliveryOpts{})
		require.Equal(t, deliveryID("github", "evt-1", base), first.ID)
		require.Equal(t, deliveryID("github", "evt-1", base.Add(time.Millisecond)), second.ID)
		require.Equal(t, base.Add(time.Millisecond), second.ReceivedAt, "the id names its receive time")
		require.Equal(t, deliveryID("github", "evt-1", base.Add(2*time.Millisecond)), last.ID)
		for _, d := range []*store.Delivery{first, second, last} {
			got := get(ctx, t, s, d.HostID, d.ID)
			require.Equal(t, d.ReceivedAt, got.ReceivedAt)
			require.Len(t, events(ctx, t, s, d.ID), 1, "one received event")
			require.Equal(t, []string{d.ID}, ids(lease(ctx, t, s, d.HostID, 10, 0, base.Add(time.Second))))
		}
		_, err := s.DeliveryGet(ctx, b.other.ID, first.ID)
		require.ErrorIs(t, err, store.ErrNotFound)

		// The provider's retry is a duplicate of each host's own delivery.
		res := insertFor(ctx, t, s, insertParams(b.other.ID, "evt-1", base, deliveryOpts{}), store.InsertDuplicate)
		require.Equal(t, second.ID, res.Delivery.ID)
	})

	t.Run("DeliveryInsertRevivesDLQ", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := toDLQ(ctx, t, s, b.host.ID, "evt-1", base)
		require.Equal(t, 1, d.Attempts)
		require.NotNil(t, d.DLQAt)

		now := base.Add(time.Hour)
		res := insertFor(ctx, t, s, insertParams(b.host.ID, "evt-1", now, deliveryOpts{}), store.InsertRevived)
		require.Equal(t, d.ID, res.Delivery.ID)
		require.Equal(t, store.StatusQueued, res.Delivery.Status)
		require.Zero(t, res.Delivery.Attempts)
		require.Nil(t, res.Delivery.NextRetryAt)
		require.Nil(t, res.Delivery.DLQAt)

		requireRequeued(ctx, t, s, b.host.ID, d.ID, store.TransitionRevive, now)
	})

	t.Run("DeliveryListAndCount", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var all []*store.Delivery // oldest first
		for i := range 10 {
			source := "github"
			if i%3 == 0 {
				source = "stripe"
			}
			at := base.Add(time.Duration(i) * time.Second)
			if i == 5 {
				at = base.Add(4 * time.Second) // a tie on received_at, broken by id
			}
			all = append(all, insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%02d", i), at, deliveryOpts{source: source}))
		}
		insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})

		// Move a few along: 0..2 leased, then 0 acked and 1 dead-lettered.
		require.Len(t, lease(ctx, t, s, b.host.ID, 3, 0, base.Add(time.Minute)), 3)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base.Add(time.Minute), all[0].ID))
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base.Add(time.Minute), delivery.Nack{ID: all[1].ID, Error: "bad", Retryable: false}))

		newestFirst := slices.Clone(all)
		slices.SortFunc(newestFirst, func(x, y *store.Delivery) int {
			if c := y.ReceivedAt.Compare(x.ReceivedAt); c != 0 {
				return c
			}
			if x.ID > y.ID {
				return -1
			}
			return 1
		})

		list, err := s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Equal(t, ids(newestFirst), ids(list), "newest first, other hosts excluded")
		for _, d := range list {
			require.Nil(t, d.RawBody, "lists carry no bodies")
			require.NotZero(t, d.BodySize)
		}

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Status: store.StatusDelivering})
		require.NoError(t, err)
		require.Equal(t, []string{all[2].ID}, ids(list))

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Source: "stripe"})
		require.NoError(t, err)
		require.Equal(t, []string{all[9].ID, all[6].ID, all[3].ID, all[0].ID}, ids(list))

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Source: "stripe", Status: store.StatusQueued})
		require.NoError(t, err)
		require.Equal(t, []string{all[9].ID, all[6].ID, all[3].ID}, ids(list))

		// Keyset paging: pages of 3 cover everything once, in order.
		var paged []string
		p := &store.DeliveryListParams{HostID: b.host.ID, Limit: 3}
		for range 10 {
			page, err := s.DeliveryList(ctx, p)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), 3)
			if len(page) == 0 {
				break
			}
			paged = append(paged, ids(page)...)
			last := page[len(page)-1]
			p.BeforeReceivedAt, p.BeforeID = ptr(last.ReceivedAt), last.ID
		}
		require.Equal(t, ids(newestFirst), paged, "no overlap, no gaps")

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, map[store.Status]int{
			store.StatusQueued: 7, store.StatusDelivering: 1, store.StatusDelivered: 0,
			store.StatusAcked: 1, store.StatusRetrying: 0, store.StatusDLQ: 1,
		}, counts)

		counts, err = s.DeliveryCountByStatus(ctx, "nope")
		require.NoError(t, err)
		for _, st := range store.Statuses {
			require.Zero(t, counts[st])
		}
	})
}

// leasedParams are insertParams stored already leased (InsertLease).
func leasedParams(hostID, eventID string, at time.Time, o deliveryOpts) *store.DeliveryInsertParams {
	p := insertParams(hostID, eventID, at, o)
	p.Lease = &store.InsertLease{For: leaseFor}
	return p
}

// sameButIdentity blanks what tells two deliveries of different events
// apart (ids, event id, headers, correlation id), so that the rest — the
// state — can be compared.
func sameButIdentity(d *store.Delivery) store.Delivery {
	c := *d
	c.ID, c.EventID, c.Headers, c.CorrelationID = "", "", nil, ""
	return c
}

// eventsButIdentity is a delivery's audit trail without event and
// delivery ids.
func eventsButIdentity(evs []*store.DeliveryEvent) []store.DeliveryEvent {
	out := make([]store.DeliveryEvent, len(evs))
	for i, e := range evs {
		out[i] = *e
		out[i].ID, out[i].DeliveryID = 0, ""
	}
	return out
}

// exerciseInsertLeased: a delivery stored leased (DeliveryInsertParams.Lease)
// is, in its row and its audit trail, the delivery a lease right after its
// insert would have made; only a new event is leased, and a leased one
// wakes no one (its connection pushes it).
func exerciseInsertLeased(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("InsertLeasedAsLeaseWould", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		at := base.Add(1234567 * time.Microsecond)
		body := []byte(`{"same":"body"}`)

		// One stored, then leased...
		plain := insert(ctx, t, s, b.host.ID, "evt-plain", at, deliveryOpts{body: body})
		viaLease := lease(ctx, t, s, b.host.ID, 10, 0, at)
		require.Equal(t, []string{plain.ID}, ids(viaLease))

		// ...and one stored leased, in the same millisecond.
		p := leasedParams(b.host.ID, "evt-pushed", at, deliveryOpts{body: body})
		res := insertFor(ctx, t, s, p, store.InsertQueued)
		pushed := res.Delivery
		require.Equal(t, store.StatusDelivering, pushed.Status)
		require.Equal(t, 1, pushed.Attempts)
		require.Equal(t, body, pushed.RawBody, "the insert answers the body, to be pushed")

		require.Equal(t, sameButIdentity(viaLease[0]), sameButIdentity(pushed), "answered as the lease answers")
		require.Equal(t, sameButIdentity(get(ctx, t, s, b.host.ID, plain.ID)), sameButIdentity(get(ctx, t, s, b.host.ID, pushed.ID)),
			"stored as the lease stores")
		require.Equal(t, pushed, get(ctx, t, s, b.host.ID, pushed.ID), "the insert answers what a read gives")
		require.Equal(t, eventsButIdentity(events(ctx, t, s, plain.ID)), eventsButIdentity(events(ctx, t, s, pushed.ID)),
			"the same audit trail: received, then leased")
		require.Len(t, events(ctx, t, s, pushed.ID), 2)

		// Not available to a lease: it is out on its lease.
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, at.Add(time.Second)))

		// It goes on as a leased one does: delivered, then acked.
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{pushed.ID}, Now: at})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, at, pushed.ID))
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, pushed.ID).Status)
	})

	t.Run("LeaseNamesItsTransport", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// A lease on the socket, a lease for a heartbeat, a delivery stored
		// leased to a socket and one stored leased to a waiting long poll:
		// each lease event names the transport that carried it.
		polled := insert(ctx, t, s, b.host.ID, "evt-polled", base, deliveryOpts{})
		lp := &store.DeliveryLeaseParams{HostID: b.host.ID, Via: store.ViaHeartbeat, Max: 10, MaxBytes: 1 << 20, LeaseFor: leaseFor, Now: base}
		res, err := s.DeliveryLease(ctx, lp)
		require.NoError(t, err)
		require.Equal(t, []string{polled.ID}, ids(res.Deliveries))
		pushed := insert(ctx, t, s, b.host.ID, "evt-pushed", base.Add(time.Second), deliveryOpts{})
		lp.Via, lp.Now = store.ViaSocket, base.Add(time.Second)
		res, err = s.DeliveryLease(ctx, lp)
		require.NoError(t, err)
		require.Equal(t, []string{pushed.ID}, ids(res.Deliveries))
		atIntake := map[store.Via]string{}
		for _, via := range []store.Via{store.ViaSocket, store.ViaHeartbeat} {
			p := leasedParams(b.host.ID, "evt-at-intake-"+string(via), base.Add(2*time.Second), deliveryOpts{})
			p.Lease.Via = via
			r, err := s.DeliveryInsert(ctx, p)
			require.NoError(t, err)
			atIntake[via] = r.Delivery.ID
		}
		// And in one batch, the two side by side.
		var batch []*store.DeliveryInsertParams
		for _, via := range []store.Via{store.ViaSocket, store.ViaHeartbeat} {
			p := leasedParams(b.host.ID, "evt-batch-"+string(via), base.Add(3*time.Second), deliveryOpts{})
			p.Lease.Via = via
			batch = append(batch, p)
		}
		rs, err := s.DeliveryInsertBatch(ctx, batch)
		require.NoError(t, err)
		for id, want := range map[string]store.Transition{
			polled.ID: store.TransitionLease, pushed.ID: store.TransitionPush,
			atIntake[store.ViaSocket]: store.TransitionPush, atIntake[store.ViaHeartbeat]: store.TransitionLease,
			rs[0].Delivery.ID: store.TransitionPush, rs[1].Delivery.ID: store.TransitionLease,
		} {
			ev := lastEvent(ctx, t, s, id)
			require.Equal(t, store.StatusDelivering, ev.To, id)
			require.Equal(t, want.Reason, ev.Reason, id)
		}
		require.NotEqual(t, store.TransitionLease.Reason, store.TransitionPush.Reason)
	})

	t.Run("InsertLeasedExpires", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Leased and never pushed (the cloud stopped): its lease ends, and
		// it is due again at once.
		res, err := s.DeliveryInsert(ctx, leasedParams(b.host.ID, "evt-1", base, deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, base.Add(leaseFor), *res.Delivery.LeaseExpiresAt)
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, base.Add(leaseFor)))
		require.Equal(t, 1, expire(ctx, t, s, delivery.DefaultRetryPolicy, base.Add(leaseFor+time.Millisecond)))
		require.Equal(t, store.TransitionExpireUnwritten.Reason, lastEvent(ctx, t, s, res.Delivery.ID).Reason)
		again := lease(ctx, t, s, b.host.ID, 10, 0, base.Add(leaseFor+time.Millisecond))
		require.Equal(t, []string{res.Delivery.ID}, ids(again))
		require.Equal(t, 2, again[0].Attempts)
	})

	t.Run("InsertLeasedOnlyNew", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		dead := toDLQ(ctx, t, s, b.host.ID, "evt-dead", base)
		old := insert(ctx, t, s, b.host.ID, "evt-old", base, deliveryOpts{})
		deadEvents := len(events(ctx, t, s, dead.ID))
		// Another host's delivery holds the id evt-taken would get.
		insert(ctx, t, s, b.other.ID, "evt-taken", base.Add(time.Minute), deliveryOpts{})
		at := base.Add(time.Minute)
		ps := []*store.DeliveryInsertParams{
			leasedParams(b.host.ID, "evt-new", at, deliveryOpts{}),
			leasedParams(b.host.ID, "evt-old", at, deliveryOpts{}),                       // duplicate
			leasedParams(b.host.ID, "evt-dead", at, deliveryOpts{}),                      // revived, not leased
			leasedParams(b.host.ID, "evt-new", at.Add(time.Millisecond), deliveryOpts{}), // repeat in the batch
			insertParams(b.host.ID, "evt-plain", at, deliveryOpts{}),                     // not leased
			leasedParams(b.host.ID, "evt-taken", at, deliveryOpts{}),                     // a millisecond on
		}
		res, err := s.DeliveryInsertBatch(ctx, ps)
		require.NoError(t, err)
		want := []store.InsertOutcome{store.InsertQueued, store.InsertDuplicate, store.InsertRevived,
			store.InsertDuplicate, store.InsertQueued, store.InsertQueued}
		for i, r := range res {
			require.Equal(t, want[i], r.Outcome, "insert %d (%s)", i, ps[i].EventID)
		}
		require.Equal(t, store.StatusDelivering, res[0].Delivery.Status)
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.host.ID, res[0].Delivery.ID).Status)
		require.Equal(t, res[0].Delivery.ID, res[3].Delivery.ID, "the repeat names the first, leased once")
		require.Len(t, events(ctx, t, s, res[0].Delivery.ID), 2)

		require.Equal(t, old.ID, res[1].Delivery.ID)
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, old.ID).Status, "a duplicate is not leased")
		require.Len(t, events(ctx, t, s, old.ID), 1)

		require.Equal(t, store.StatusQueued, res[2].Delivery.Status, "a revived one is not leased")
		require.Len(t, events(ctx, t, s, dead.ID), deadEvents+1)

		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, res[4].Delivery.ID).Status)

		taken := res[5].Delivery
		require.Equal(t, deliveryID("github", "evt-taken", at.Add(time.Millisecond)), taken.ID)
		require.Equal(t, at.Add(time.Millisecond+leaseFor), *taken.LeaseExpiresAt, "leased when it was stored")
		require.Equal(t, taken, get(ctx, t, s, b.host.ID, taken.ID))
		for _, e := range events(ctx, t, s, taken.ID) {
			require.Equal(t, at.Add(time.Millisecond), e.At)
		}

		// What is left to lease is what was not leased at intake.
		require.ElementsMatch(t, []string{old.ID, dead.ID, res[4].Delivery.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, at)))
	})

	t.Run("InsertLeasedWakesNoOne", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		woken, stop := listenWakeUps(ctx, t, s)
		_, err := s.DeliveryInsert(ctx, leasedParams(b.host.ID, "evt-1", base, deliveryOpts{}))
		require.NoError(t, err)
		// Wake-ups come in commit order: the mark after it shows that it
		// woke no one.
		insert(ctx, t, s, b.other.ID, "mark", base, deliveryOpts{})
		require.Equal(t, b.other.ID, nextWakeUp(t, woken), "a leased insert wakes no one")
		require.NoError(t, stop())
	})
}
