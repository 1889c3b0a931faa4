package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

func ptr[T any](v T) *T { return &v }

func hashOf(s string) []byte { return []byte("hash:" + s) }

func createHost(ctx context.Context, t *testing.T, s store.Store, id string, now time.Time) *store.Host {
	t.Helper()
	h, err := s.HostCreate(ctx, &store.HostCreateParams{
		ID:              id,
		Name:            "name of " + id,
		ClaimCodeHash:   hashOf("code-" + id),
		ClaimExpiresAt:  now.Add(24 * time.Hour),
		RateLimitPerMin: 100,
		RateLimitBurst:  20,
		Now:             now,
	})
	require.NoError(t, err)
	return h
}

// deliveryOpts varies an inserted delivery.
type deliveryOpts struct {
	source      string // default "github"
	body        []byte // default a small JSON body
	maxAttempts int
}

func deliveryID(source, eventID string, at time.Time) string {
	return fmt.Sprintf("%s:%s:%d", source, eventID, at.UnixMilli())
}

func insertParams(hostID, eventID string, at time.Time, o deliveryOpts) *store.DeliveryInsertParams {
	if o.source == "" {
		o.source = "github"
	}
	if o.body == nil {
		o.body = []byte(`{"event":"` + eventID + `"}`)
	}
	return &store.DeliveryInsertParams{
		ID:            deliveryID(o.source, eventID, at),
		HostID:        hostID,
		Source:        o.source,
		EventID:       eventID,
		EventType:     "pull_request",
		EventAction:   "opened",
		Headers:       map[string]string{"x-github-event": "pull_request", "x-github-delivery": eventID},
		RawBody:       o.body,
		MaxAttempts:   o.maxAttempts,
		CorrelationID: "corr-" + eventID,
		ReceivedAt:    at,
	}
}

func insert(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time, o deliveryOpts) *store.Delivery {
	t.Helper()
	return insertFor(ctx, t, s, insertParams(hostID, eventID, at, o), store.InsertQueued).Delivery
}

// insertFor inserts p, which must come out as want.
func insertFor(ctx context.Context, t *testing.T, s store.Store, p *store.DeliveryInsertParams, want store.InsertOutcome) *store.DeliveryInsertResult {
	t.Helper()
	res, err := s.DeliveryInsert(ctx, p)
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome)
	return res
}

func get(ctx context.Context, t *testing.T, s store.Store, hostID, id string) *store.Delivery {
	t.Helper()
	d, err := s.DeliveryGet(ctx, hostID, id)
	require.NoError(t, err)
	return d
}

func lease(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) []*store.Delivery {
	t.Helper()
	return leaseMore(ctx, t, s, hostID, max, maxBytes, now).Deliveries
}

func leaseMore(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) *store.DeliveryLeaseResult {
	t.Helper()
	res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: hostID, Max: max, MaxBytes: maxBytes, LeaseFor: leaseFor, Now: now})
	require.NoError(t, err)
	return res
}

// handOut leases as a heartbeat does whose answer was written: the leased
// deliveries are delivered (the returned copies still say delivering).
func handOut(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) []*store.Delivery {
	t.Helper()
	leased := lease(ctx, t, s, hostID, max, maxBytes, now)
	n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: hostID, IDs: ids(leased), Now: now})
	require.NoError(t, err)
	require.Equal(t, len(leased), n)
	return leased
}

func ids(ds []*store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func nack(ctx context.Context, t *testing.T, s store.Store, hostID string, now time.Time, nacks ...delivery.Nack) int {
	t.Helper()
	n, err := s.DeliveryNack(ctx, delivery.NackParams(hostID, nacks, delivery.DefaultRetryPolicy, now))
	require.NoError(t, err)
	return n
}

func ack(ctx context.Context, t *testing.T, s store.Store, hostID string, now time.Time, ids ...string) int {
	t.Helper()
	n, err := s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: hostID, IDs: ids, Now: now})
	require.NoError(t, err)
	return n
}

func events(ctx context.Context, t *testing.T, s store.Store, id string) []*store.DeliveryEvent {
	t.Helper()
	evs, err := s.DeliveryEventList(ctx, id)
	require.NoError(t, err)
	return evs
}

func lastEvent(ctx context.Context, t *testing.T, s store.Store, id string) *store.DeliveryEvent {
	t.Helper()
	evs := events(ctx, t, s, id)
	require.NotEmpty(t, evs)
	return evs[len(evs)-1]
}

// requireLastEvent checks a delivery's last audit event, all but its id.
func requireLastEvent(ctx context.Context, t *testing.T, s store.Store, want store.DeliveryEvent) {
	t.Helper()
	got := *lastEvent(ctx, t, s, want.DeliveryID)
	got.ID = 0
	require.Equal(t, want, got)
}

// leaseOne inserts a delivery at at and leases it: the one delivery the
// lease takes.
func leaseOne(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time) *store.Delivery {
	t.Helper()
	d := insert(ctx, t, s, hostID, eventID, at, deliveryOpts{})
	leased := lease(ctx, t, s, hostID, 1, 0, at)
	require.Len(t, leased, 1)
	require.Equal(t, d.ID, leased[0].ID, "the lease takes the delivery just inserted")
	return d
}

// handOutOne inserts a delivery at at and hands it out (handOut): the one
// delivery handed out.
func handOutOne(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time) *store.Delivery {
	t.Helper()
	d := insert(ctx, t, s, hostID, eventID, at, deliveryOpts{})
	handed := handOut(ctx, t, s, hostID, 1, 0, at)
	require.Len(t, handed, 1)
	require.Equal(t, d.ID, handed[0].ID, "the delivery just inserted is handed out")
	return d
}

// requireRequeued checks that a dead letter was put back in the queue by
// tr at now (its last audit event says so), and that it is handed out
// again as a first attempt.
func requireRequeued(ctx context.Context, t *testing.T, s store.Store, hostID, id string, tr store.Transition, now time.Time) {
	t.Helper()
	requireLastEvent(ctx, t, s, store.DeliveryEvent{DeliveryID: id, At: now, From: store.StatusDLQ, To: store.StatusQueued, Reason: tr.Reason})
	leased := lease(ctx, t, s, hostID, 10, 0, now)
	require.Equal(t, []string{id}, ids(leased))
	require.Equal(t, 1, leased[0].Attempts, "a first attempt again")
}

// expire expires the leases due at now under policy, and says how many.
func expire(ctx context.Context, t *testing.T, s store.Store, policy delivery.RetryPolicy, now time.Time) int {
	t.Helper()
	n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(policy, 0, now))
	require.NoError(t, err)
	return n
}

// waitNoErrors waits for wg's goroutines, then fails t with any error they
// sent on errs.
func waitNoErrors(t *testing.T, wg *sync.WaitGroup, errs chan error) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// toDLQ inserts a delivery and dead-letters it with a non-retryable nack.
func toDLQ(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time) *store.Delivery {
	t.Helper()
	d := insert(ctx, t, s, hostID, eventID, at, deliveryOpts{})
	leased := lease(ctx, t, s, hostID, 100, 0, at)
	require.Contains(t, ids(leased), d.ID)
	require.Equal(t, 1, nack(ctx, t, s, hostID, at, delivery.Nack{ID: d.ID, Error: "boom", Retryable: false}))
	d = get(ctx, t, s, hostID, d.ID)
	require.Equal(t, store.StatusDLQ, d.Status)
	return d
}

func listen(ctx context.Context, t testing.TB, s store.Store, p *store.DeliveryListenParams) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	done := make(chan error, 1)
	p.Listening = func() { close(listening) }
	go func() { done <- s.DeliveryListen(ctx, p) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() })
	select {
	case <-listening:
	case <-done:
		t.Fatal("DeliveryListen ended before it listened")
	}
	return stop
}

// listenWakeUps listens for wake-ups (DeliveryListenParams.Available): the
// host of each comes on woken. stop ends the listening (t's cleanup does
// too).
func listenWakeUps(ctx context.Context, t testing.TB, s store.Store) (woken chan string, stop func() error) {
	t.Helper()
	woken = make(chan string, 100)
	stop = listen(ctx, t, s, &store.DeliveryListenParams{Available: func(hostID string) { woken <- hostID }})
	return woken, stop
}

// FoldVolume folds s's volume up to until until a fold writes nothing, as
// the sweep's job does, and returns how many counts the folds wrote.
func FoldVolume(ctx context.Context, t testing.TB, s store.Store, until time.Time) int {
	t.Helper()
	total := 0
	for {
		n, err := s.DeliveryVolumeFold(ctx, &store.VolumeFoldParams{Until: until})
		require.NoError(t, err)
		if n == 0 {
			return total
		}
		total += n
	}
}

// KeptVolumeReads are the reads of the volume kept that the console makes
// (flow.KeptVolumeQuery's host, hosts and outcome), by name, for the
// engines' plan tests.
func KeptVolumeReads() map[string]struct {
	Host    *string
	Hosts   []string
	Outcome string
} {
	every, one := "", "h1"
	return map[string]struct {
		Host    *string
		Hosts   []string
		Outcome string
	}{
		"every host":                {&every, nil, ""},
		"one host":                  {&one, nil, ""},
		"one host's received":       {&one, nil, store.OutcomeReceived},
		"each host's received":      {nil, nil, store.OutcomeReceived},
		"a page of hosts' received": {nil, []string{"k1", "k7", "k500"}, store.OutcomeReceived}, // the hosts page
	}
}

// HostsOfFour creates n hosts with create (the cloud's own host creation,
// given a name) and gives each four deliveries received in the four hours
// before now: two acked, one queued, and one leased (odd hosts) or
// dead-lettered (even ones). What the host list and the hosts page read,
// a host at a time.
func HostsOfFour(ctx context.Context, t testing.TB, s store.Store, n int, now time.Time, create func(name string) (string, error)) {
	t.Helper()
	for i := range n {
		id, err := create(fmt.Sprintf("host %d", i))
		require.NoError(t, err)
		for k := range 4 {
			_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: fmt.Sprintf("github:e%d-%d:1", i, k), HostID: id,
				Source: "github", EventID: fmt.Sprintf("e%d-%d", i, k), RawBody: []byte("{}"), ReceivedAt: now.Add(-time.Duration(k+1) * time.Hour), MaxAttempts: 1})
			require.NoError(t, err)
		}
		leased, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: id, Max: 3, LeaseFor: time.Hour, Now: now})
		require.NoError(t, err)
		_, err = s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: id, IDs: []string{leased.Deliveries[0].ID, leased.Deliveries[1].ID}, Now: now})
		require.NoError(t, err)
		if i%2 == 0 {
			_, err = s.DeliveryNack(ctx, delivery.NackParams(id, []delivery.Nack{{ID: leased.Deliveries[2].ID}}, delivery.RetryPolicy{}, now))
			require.NoError(t, err)
		}
	}
}
