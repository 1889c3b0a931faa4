package delivery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// A long poll that answered with all there was stays parked for its host's
// next poll: a webhook stored meanwhile is stored leased to it, and the
// next poll answers with it at once, with no lease of its own.

// answeredPoll runs a poll that waits having found nothing and answers with
// the one webhook stored leased to it (all there was), and returns that
// delivery's id.
func (b *bundle) answeredPoll(p *polling) string {
	b.t.Helper()
	ch := b.poll(b.ctx, p, 10)
	b.seq++
	res, handed := b.sendLeased(b.reservePoll(p), fmt.Sprintf("e-answered-%d", b.seq))
	require.True(b.t, handed)
	got := <-ch
	require.NoError(b.t, got.err)
	require.Len(b.t, got.res.Deliveries, 1)
	require.Equal(b.t, res.Delivery.ID, got.res.Deliveries[0].ID)
	p.svc.RecordWrite(b.ctx, b.host.ID, []string{res.Delivery.ID}, nil)
	return res.Delivery.ID
}

func TestParkedPollAnswersTheNextPoll(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		b.answeredPoll(p)
		require.True(t, p.svc.Parked(b.host.ID))
		leases := p.cs.leases.Load()

		// Two webhooks arrive before the host polls again.
		v1 := p.intake.Reserve(b.host.ID, 2)
		require.NotNil(t, v1, "the parked poll holds room")
		r1, handed := b.sendLeased(v1, "e-next-1")
		require.True(t, handed)
		v2 := p.intake.Reserve(b.host.ID, 2)
		require.NotNil(t, v2, "a parked poll holds up to its max")
		r2, handed := b.sendLeased(v2, "e-next-2")
		require.True(t, handed)
		require.Equal(t, store.StatusDelivering, b.get(r1.Delivery.ID).Status, "stored leased")

		got := <-b.poll(b.ctx, p, 10)
		require.NoError(t, got.err)
		ids := []string{}
		for _, d := range got.res.Deliveries {
			ids = append(ids, d.ID)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, []byte(`{}`), d.RawBody)
		}
		require.Equal(t, []string{r1.Delivery.ID, r2.Delivery.ID}, ids, "in the order they were stored")
		require.Equal(t, leases, p.cs.leases.Load(), "no lease: answered with what was held")
		p.svc.RecordWrite(b.ctx, b.host.ID, ids, nil)
		require.Equal(t, store.StatusDelivered, b.get(r2.Delivery.ID).Status)
		require.Equal(t, b.trail(r1.Delivery.ID), b.trail(r2.Delivery.ID))
		require.True(t, p.svc.Parked(b.host.ID), "and that poll is parked in turn")
	})
}

// What a parked poll holds when no poll of its host came is given back,
// due at once with its attempt given back, for the next lease.
func TestParkedPollGivesBackWhenNoPollCame(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		b.answeredPoll(p)
		v := p.intake.Reserve(b.host.ID, 2)
		require.NotNil(t, v)
		res, handed := b.sendLeased(v, "e-held")
		require.True(t, handed)
		max := b.get(res.Delivery.ID).MaxAttempts

		b.clock.Advance(delivery.ParkFor - time.Millisecond)
		require.True(t, p.svc.Parked(b.host.ID), "not yet")
		b.clock.Advance(time.Millisecond)
		require.Eventually(t, func() bool { return !p.svc.Parked(b.host.ID) }, 10*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return b.get(res.Delivery.ID).Status == store.StatusRetrying }, 10*time.Second, time.Millisecond)
		d := b.get(res.Delivery.ID)
		require.Equal(t, b.clock.Now(), d.NextRetryAt.UTC(), "due again at once")
		require.Equal(t, max+1, d.MaxAttempts, "its attempt given back")
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "no poll holds room")
		require.Equal(t, []string{res.Delivery.ID}, b.lease(), "the next lease takes it")
	})
}

// A webhook stored pending while a poll is parked closes it: the next poll
// answers with what it held, then the one after looks and leases the
// pending one. Nothing stored later goes before it.
func TestParkedPollNotPastAPendingOne(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		b.answeredPoll(p)
		v := p.intake.Reserve(b.host.ID, 2)
		held, handed := b.sendLeased(v, "e-held")
		require.True(t, handed)
		pending := b.send()
		p.intake.Pending(b.host.ID)
		require.Nil(t, p.intake.Reserve(b.host.ID, 2), "not past the pending one")

		got := <-b.poll(b.ctx, p, 10)
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, held.Delivery.ID, got.res.Deliveries[0].ID, "what it held first: stored before")
		require.False(t, p.svc.Parked(b.host.ID), "that poll did not look: it does not park")
		leases := p.cs.leases.Load()
		got = <-b.poll(b.ctx, p, 10)
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, pending, got.res.Deliveries[0].ID)
		require.Equal(t, leases+1, p.cs.leases.Load(), "leased by its look")
	})
}

// A poll whose answer left work behind (its max) does not park: the next
// poll looks, oldest first.
func TestPollLeavingMoreDoesNotPark(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		first, second := b.send(), b.send()
		got := <-b.poll(b.ctx, p, 1)
		require.NoError(t, got.err)
		require.Equal(t, first, got.res.Deliveries[0].ID)
		require.True(t, got.res.More)
		require.False(t, p.svc.Parked(b.host.ID))
		require.Nil(t, p.intake.Reserve(b.host.ID, 2))
		got = <-b.poll(b.ctx, p, 1)
		require.NoError(t, got.err)
		require.Equal(t, second, got.res.Deliveries[0].ID)
	})
}

// A host stopping, or reporting a lost answer, gets nothing more from its
// parked poll: what it held is given back at once; so it is when the cloud
// stops waiting.
func TestParkedPollGivenBackOnStopsAndLostAnswers(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		park := func() string {
			answered := b.answeredPoll(p)
			_, err := p.svc.Report(b.ctx, b.host.ID, &delivery.Report{Acks: []string{answered}})
			require.NoError(t, err)
			v := p.intake.Reserve(b.host.ID, 2)
			require.NotNil(t, v)
			res, handed := b.sendLeased(v, "e-held-"+b.clock.Now().Format("150405.000"))
			require.True(t, handed)
			b.clock.Advance(time.Millisecond)
			return res.Delivery.ID
		}
		check := func(id, when string) {
			t.Helper()
			require.False(t, p.svc.Parked(b.host.ID), when)
			d := b.get(id)
			require.Equal(t, store.StatusRetrying, d.Status, when)
			require.Equal(t, 1, d.Attempts, when)
		}

		id := park()
		p.svc.HostStopping(b.ctx, b.host.ID)
		check(id, "host stopping")
		require.Equal(t, []string{id}, b.lease())
		b.report(delivery.Report{Acks: []string{id}})

		id = park()
		_, err := p.svc.Report(b.ctx, b.host.ID, &delivery.Report{AnswerLost: true})
		require.NoError(t, err)
		check(id, "answer lost")
		require.Equal(t, []string{id}, b.lease())
		b.report(delivery.Report{Acks: []string{id}})

		id = park()
		p.svc.StopWaiting()
		check(id, "cloud stopping")
	})
}

// The poll after a clean answer waits at once, with no look of its own: it
// is open to the intake from the start. A retry coming due still ends its
// wait, as any poll's.
func TestPollAfterACleanAnswerWaitsWithoutALook(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		p := b.polling()
		b.answeredPoll(p)
		leases := p.cs.leases.Load()
		ch := b.poll(b.ctx, p, 10)
		b.stillWaiting(p, ch, "nothing to answer")
		require.Equal(t, leases, p.cs.leases.Load(), "no look")
		res, handed := b.sendLeased(b.reservePoll(p), "e-next")
		require.True(t, handed)
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, res.Delivery.ID, got.res.Deliveries[0].ID)
		p.svc.RecordWrite(b.ctx, b.host.ID, []string{res.Delivery.ID}, nil)

		// Its handler fails: the retry is due in 30 s.
		id := res.Delivery.ID
		_, err := p.svc.Report(b.ctx, b.host.ID, &delivery.Report{Nacks: []delivery.Nack{{ID: id, Error: "boom", Retryable: true}}})
		require.NoError(t, err)
		due := b.get(id).NextRetryAt.UTC()
		require.True(t, due.After(b.clock.Now()))

		ch = b.poll(b.ctx, p, 10)
		b.stillWaiting(p, ch, "until the retry is due")
		b.clock.Advance(due.Sub(b.clock.Now()))
		got = <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, id, got.res.Deliveries[0].ID, "the retry, when due")
		require.Equal(t, 2, got.res.Deliveries[0].Attempts)
	})
}

// Where other replicas may share the store, an answered poll does not park:
// the host's next poll may go elsewhere.
func TestPollsDoNotParkUnlessAsked(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		id := b.send()
		res, err := b.svc.Lease(b.ctx, b.host, 10, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, id, res.Deliveries[0].ID)
		require.False(t, b.svc.Parked(b.host.ID))
	})
}
