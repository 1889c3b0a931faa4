package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

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
		res, err := s.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, store.InsertQueued, res.Outcome)
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
		n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, 0, base.Add(leaseFor+time.Millisecond)))
		require.NoError(t, err)
		require.Equal(t, 1, n)
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
		woken := make(chan string, 100)
		stop := listen(ctx, t, s, &store.DeliveryListenParams{
			Available: func(hostID string) { woken <- hostID },
		})
		_, err := s.DeliveryInsert(ctx, leasedParams(b.host.ID, "evt-1", base, deliveryOpts{}))
		require.NoError(t, err)
		// Wake-ups come in commit order: the mark after it shows that it
		// woke no one.
		insert(ctx, t, s, b.other.ID, "mark", base, deliveryOpts{})
		require.Equal(t, b.other.ID, nextWakeUp(t, woken), "a leased insert wakes no one")
		require.NoError(t, stop())
	})
}
