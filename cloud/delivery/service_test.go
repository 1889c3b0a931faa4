package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

// The delivery core driven as a transport drives it — report, lease, wait,
// hand out — on a real store and a fake clock, without HTTP.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	t     *testing.T
	ctx   context.Context
	store store.Store
	clock *clockwork.FakeClock
	svc   *delivery.Service
	host  *store.Host
	seq   int
}

// engines runs test on SQLite, and on Postgres when RELAY_TEST_DATABASE_URL
// is set.
func engines(t *testing.T, test func(t *testing.T, b *bundle)) {
	open := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			return sqlitetest.Open(t)
		},
		"postgres": func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
			require.NoError(t, err)
			return st
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			st := open[name](t)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			test(t, setup(t, st))
		})
	}
}

func setup(t *testing.T, st store.Store) *bundle {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	h, err := st.HostCreate(ctx, &store.HostCreateParams{ID: "h1", Name: "h1", ClaimCodeHash: []byte("code"),
		ClaimExpiresAt: clock.Now().Add(time.Hour), Now: clock.Now()})
	require.NoError(t, err)
	svc := delivery.New(st, delivery.Config{LeaseFor: time.Minute, MaxWait: time.Minute}, clock,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	return &bundle{t: t, ctx: ctx, store: st, clock: clock, svc: svc, host: h}
}

// send stores a new delivery for the host and returns its id.
func (b *bundle) send() string {
	b.t.Helper()
	b.seq++
	id := fmt.Sprintf("e-%d", b.seq)
	res, err := b.store.DeliveryInsert(b.ctx, &store.DeliveryInsertParams{ID: "github:" + id, HostID: b.host.ID,
		Source: "github", EventID: id, RawBody: []byte(`{}`), ReceivedAt: b.clock.Now()})
	require.NoError(b.t, err)
	return res.Delivery.ID
}

// lease leases without waiting and hands the batch out.
func (b *bundle) lease() []string {
	b.t.Helper()
	res, err := b.svc.Lease(b.ctx, b.host, 10, 0)
	require.NoError(b.t, err)
	ids := make([]string, len(res.Deliveries))
	for i, d := range res.Deliveries {
		ids[i] = d.ID
	}
	b.svc.RecordWrite(b.ctx, b.host.ID, ids, nil)
	return ids
}

func (b *bundle) get(id string) *store.Delivery {
	b.t.Helper()
	d, err := b.store.DeliveryGet(b.ctx, b.host.ID, id)
	require.NoError(b.t, err)
	return d
}

func (b *bundle) report(r delivery.Report) *store.DeliveryReportResult {
	b.t.Helper()
	res, err := b.svc.Report(b.ctx, b.host.ID, &r)
	require.NoError(b.t, err)
	return res
}

func TestServiceScheduleFiveFailuresThenDLQ(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		id := b.send()
		waits := []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
		for attempt := 1; attempt <= 5; attempt++ {
			require.Equal(t, []string{id}, b.lease(), "attempt %d", attempt)
			require.Equal(t, store.StatusDelivered, b.get(id).Status)
			res := b.report(delivery.Report{Nacks: []delivery.Nack{{ID: id, Error: fmt.Sprintf("503 on attempt %d", attempt), Retryable: true}}})
			require.Equal(t, 1, res.Nacked)
			d := b.get(id)
			require.Equal(t, attempt, d.Attempts)
			if attempt == 5 {
				require.Equal(t, store.StatusDLQ, d.Status, "dead-lettered after the fifth failure")
				require.Equal(t, "503 on attempt 5", d.LastError)
				break
			}
			require.Equal(t, store.StatusRetrying, d.Status)
			wait := waits[attempt-1]
			require.Equal(t, b.clock.Now().Add(wait), d.NextRetryAt.UTC(), "attempt %d", attempt)
			b.clock.Advance(wait - time.Second)
			require.Empty(t, b.lease(), "not before its time (attempt %d)", attempt)
			b.clock.Advance(time.Second)
		}
		b.clock.Advance(24 * time.Hour)
		require.Empty(t, b.lease(), "dead letters are not handed out")
		evs, err := b.store.DeliveryEventList(b.ctx, id)
		require.NoError(t, err)
		require.Len(t, evs, 1+5*3, "received, then leased, delivered and nacked five times")
		require.Equal(t, "nacked by host: attempts exhausted, dead-lettered", evs[len(evs)-1].Reason)
	})
}

func TestServiceReportInOneCall(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		acked, nacked, extended, lost, held := b.send(), b.send(), b.send(), b.send(), b.send()
		require.Len(t, b.lease(), 5)
		b.clock.Advance(10 * time.Second)
		res := b.report(delivery.Report{
			Acks:       []string{acked},
			Nacks:      []delivery.Nack{{ID: nacked, Error: "boom", Retryable: false}},
			Extends:    []string{extended},
			AnswerLost: true,
			Held:       []string{extended, held},
		})
		require.Equal(t, store.DeliveryReportResult{Acked: 1, Nacked: 1, Extended: 1, Released: 1}, *res,
			"the ack and the nack come first: only the unheld one left is released")
		require.Equal(t, store.StatusAcked, b.get(acked).Status)
		require.Equal(t, store.StatusDLQ, b.get(nacked).Status)
		require.Equal(t, b.clock.Now().Add(time.Minute), b.get(extended).LeaseExpiresAt.UTC())
		l := b.get(lost)
		require.Equal(t, store.StatusRetrying, l.Status)
		require.Equal(t, b.clock.Now(), l.NextRetryAt.UTC(), "due again at once")
		require.Equal(t, store.StatusDelivered, b.get(held).Status)
		require.Equal(t, []string{lost}, b.lease(), "in the very next lease")

		require.Equal(t, store.DeliveryReportResult{}, *b.report(delivery.Report{}), "an empty report changes nothing")
	})
}

func TestServiceHandedOut(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		written, lost := b.send(), b.send()
		res, err := b.svc.Lease(b.ctx, b.host, 1, 0)
		require.NoError(t, err)
		require.True(t, res.More)
		b.svc.RecordWrite(b.ctx, b.host.ID, []string{res.Deliveries[0].ID}, nil)
		require.Equal(t, store.StatusDelivered, b.get(written).Status)

		res, err = b.svc.Lease(b.ctx, b.host, 1, 0)
		require.NoError(t, err)
		require.False(t, res.More)
		ctx, cancel := context.WithCancel(b.ctx)
		cancel() // the host is gone: recorded regardless
		b.svc.RecordWrite(ctx, b.host.ID, []string{res.Deliveries[0].ID}, errors.New("broken pipe"))
		d := b.get(lost)
		require.Equal(t, store.StatusRetrying, d.Status, "not written: the attempt failed")
		require.Equal(t, 1, d.Attempts, "and counts")
		require.Equal(t, b.clock.Now(), d.NextRetryAt.UTC(), "due again at once")
		require.Equal(t, []string{lost}, b.lease())
	})
}

func TestServiceRecordsAtMostOnceASecond(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		var changed []string
		svc := delivery.New(b.store, delivery.Config{Changed: func(id string) { changed = append(changed, id) }}, b.clock,
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, svc.Record(b.ctx, b.host, delivery.Beat{AgentVersion: "1.0"}))
		h, err := b.store.HostGet(b.ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.clock.Now(), h.LastHeartbeatAt.UTC())

		b.clock.Advance(500 * time.Millisecond)
		require.NoError(t, svc.Record(b.ctx, h, delivery.Beat{AgentVersion: "1.0"}))
		h2, err := b.store.HostGet(b.ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, *h.LastHeartbeatAt, *h2.LastHeartbeatAt, "nothing changed within the second")
		require.Empty(t, changed)

		require.NoError(t, svc.Record(b.ctx, h, delivery.Beat{AgentVersion: "1.0", Subscription: []byte(`{"sources":{}}`)}))
		h2, err = b.store.HostGet(b.ctx, b.host.ID)
		require.NoError(t, err)
		require.JSONEq(t, `{"sources":{}}`, string(h2.Subscription), "a subscription is recorded at once")
		require.Equal(t, []string{b.host.ID}, changed, "and its caches told")
	})
}

// listen runs the store's listener into the service until the test ends.
func (b *bundle) listen() {
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.svc.Listen(ctx, nil, nil) }()
	b.t.Cleanup(func() { cancel(); <-done })
	<-b.svc.Ready()
}

type leased struct {
	res *store.DeliveryLeaseResult
	err error
}

// leaseAsync leases with a wait in the background, once it is waiting on
// the fake clock.
func (b *bundle) leaseAsync(ctx context.Context, wait time.Duration) <-chan leased {
	ch := make(chan leased, 1)
	go func() {
		res, err := b.svc.Lease(ctx, b.host, 10, wait)
		ch <- leased{res, err}
	}()
	require.NoError(b.t, b.clock.BlockUntilContext(b.ctx, 1))
	return ch
}

func TestServiceWaitWakesWhenWorkArrives(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		b.listen()
		ch := b.leaseAsync(b.ctx, 30*time.Second)
		id := b.send()
		got := <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1)
		require.Equal(t, id, got.res.Deliveries[0].ID)
	})
}

func TestServiceWaitEndsWhenARetryComesDue(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		id := b.send()
		b.lease()
		b.report(delivery.Report{Nacks: []delivery.Nack{{ID: id, Retryable: true}}})
		ch := b.leaseAsync(b.ctx, time.Minute)
		b.clock.Advance(30 * time.Second)
		got := <-ch
		require.NoError(t, got.err)
		require.Len(t, got.res.Deliveries, 1, "the retry after 30 s, before the wait's end")
		require.Equal(t, 2, got.res.Deliveries[0].Attempts)
	})
}

func TestServiceWaitEndsAtMaxWait(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		ch := b.leaseAsync(b.ctx, time.Hour)
		b.clock.Advance(time.Minute) // MaxWait
		got := <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries)
		require.Zero(t, b.svc.Waiting())
	})
}

func TestServiceWaitOfAHostDeactivatedMeanwhile(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		b.listen()
		ch := b.leaseAsync(b.ctx, 30*time.Second)
		_, err := b.store.HostDeactivate(b.ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: b.clock.Now()})
		require.NoError(t, err)
		id := b.send()
		got := <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries, "handed nothing")
		require.Equal(t, store.StatusQueued, b.get(id).Status)
	})
}

func TestServiceWaitEndsOnStopAndForACallerGone(t *testing.T) {
	engines(t, func(t *testing.T, b *bundle) {
		ctx, cancel := context.WithCancel(b.ctx)
		ch := b.leaseAsync(ctx, 30*time.Second)
		cancel()
		got := <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries)
		require.Zero(t, b.svc.Waiting(), "unsubscribed")

		ch = b.leaseAsync(b.ctx, 30*time.Second)
		b.svc.StopWaiting()
		got = <-ch
		require.NoError(t, got.err)
		require.Empty(t, got.res.Deliveries)
		res, err := b.svc.Lease(b.ctx, b.host, 10, 30*time.Second)
		require.NoError(t, err, "later ones do not wait")
		require.Empty(t, res.Deliveries)
	})
}
