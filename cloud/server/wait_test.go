package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
)

// Long-poll heartbeats (wait_s), on a fake clock: a waiting heartbeat
// returns when work arrives for its host, when a retry comes due, or when
// its wait is over, whichever is first.

// waitServer serves st with the store's listener feeding waiting
// heartbeats; it returns once the listener is in place.
func waitServer(t *testing.T, st store.Store) (*bundle, *Server) {
	t.Helper()
	clock := newClock()
	s := testServer(t, st, clock, nil, Config{AdminToken: testAdmin, LeaseFor: time.Minute, MaxWait: time.Minute})
	b := &bundle{t: t, store: st, clock: clock}
	srv := b.serve(s.Handler())
	b.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.RunWakeups(ctx) }()
	t.Cleanup(func() {
		s.StopWaiting()
		srv.Close()
		cancel()
		<-done
	})
	<-s.deliveries.Ready()
	return b, s
}

func sqliteWaitServer(t *testing.T) (*bundle, *Server) {
	t.Helper()
	st := sqlitetest.Open(t)
	return waitServer(t, st)
}

type beatResult struct {
	status int
	resp   shared.HeartbeatResponse
	err    error
}

// beatAsync sends a heartbeat from another goroutine; its answer arrives on
// the channel.
func (b *bundle) beatAsync(ctx context.Context, token string, req shared.HeartbeatRequest) <-chan beatResult {
	out := make(chan beatResult, 1)
	body, _ := json.Marshal(req)
	go func() {
		r, _ := http.NewRequestWithContext(ctx, "POST", b.srv.URL+shared.PathHeartbeat, bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		served := b.track(r)
		resp, err := b.srv.Client().Do(r)
		if err != nil {
			out <- beatResult{err: err}
			return
		}
		defer resp.Body.Close()
		res := beatResult{status: resp.StatusCode}
		res.err = json.NewDecoder(resp.Body).Decode(&res.resp)
		served()
		out <- res
	}()
	return out
}

// answered waits for a heartbeat's answer: it must come without the clock
// moving.
func answered(t *testing.T, ch <-chan beatResult) shared.HeartbeatResponse {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		require.Equal(t, 200, r.status)
		return r.resp
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat is still waiting")
		return shared.HeartbeatResponse{}
	}
}

// waiting returns once the server holds one heartbeat on its clock.
func (b *bundle) waiting() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(b.t, b.clock.BlockUntilContext(ctx, 1), "no heartbeat waits")
}

func TestWaitWakesWhenWorkArrives(t *testing.T) {
	b, _ := sqliteWaitServer(t)
	g := b.claimAgent("h")
	other := b.claimAgent("other")
	start := b.clock.Now()

	ch := b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})
	b.waiting()
	other.send("for-the-other-host") // wakes nobody here, or only to find nothing
	id := g.send("d-1")
	hb := answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, id, hb.Webhooks[0].DeliveryID)
	require.Equal(t, 1, hb.Webhooks[0].Attempt)
	require.Equal(t, start, b.clock.Now(), "no time passed")
	require.Equal(t, store.StatusDelivered, g.delivery(id).Status)

	// With work already waiting, it answers at once.
	g.send("d-2")
	hb = answered(t, b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30}))
	require.Len(t, hb.Webhooks, 1)
}

func TestWaitEndsAfterWaitS(t *testing.T) {
	b, _ := sqliteWaitServer(t)
	g := b.claimAgent("h")
	ch := b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 5})
	b.waiting()
	b.clock.Advance(5*time.Second - time.Millisecond)
	b.waiting() // its timer has not fired
	b.clock.Advance(time.Millisecond)
	require.Empty(t, answered(t, ch).Webhooks)

	// A longer wait is cut to the server's longest (a minute here).
	ch = b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 3600})
	b.waiting()
	b.clock.Advance(time.Minute)
	require.Empty(t, answered(t, ch).Webhooks)

	// max_webhooks 0 never waits.
	require.Empty(t, answered(t, b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30, MaxWebhooks: shared.Ptr(0)})).Webhooks)
}

// waitAfterNack hands a host's one webhook out, has the host nack it
// (retryable or not), then starts a heartbeat waiting waitS seconds and
// returns once it waits.
func waitAfterNack(t *testing.T, retryable bool, waitS int) (*bundle, *agent, string, <-chan beatResult) {
	t.Helper()
	b, _ := sqliteWaitServer(t)
	g := b.claimAgent("h")
	id := g.send("d-1")
	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)
	g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: id, Retryable: retryable}}})

	ch := b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: waitS})
	b.waiting()
	return b, g, id, ch
}

func TestWaitEndsWhenARetryComesDue(t *testing.T) {
	b, _, _, ch := waitAfterNack(t, true, 50)
	b.clock.Advance(30 * time.Second) // the first retry's wait
	hb := answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, 2, hb.Webhooks[0].Attempt)
}

func TestWaitHandsNothingToAHostDeactivatedMeanwhile(t *testing.T) {
	b, g, id, ch := waitAfterNack(t, true, 50)
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+g.id+"/deactivate", nil).status)
	b.clock.Advance(30 * time.Second) // the retry comes due
	require.Empty(t, answered(t, ch).Webhooks, "its token was revoked while it waited")
	require.Equal(t, 1, g.delivery(id).Attempts, "no attempt handed out")
}

func TestWaitWokenByAManualRetry(t *testing.T) {
	b, g, id, ch := waitAfterNack(t, false, 30)
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+g.id+"/webhooks/"+id+"/retry", nil).status)
	hb := answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, 1, hb.Webhooks[0].Attempt, "attempts were reset")
}

func TestWaitEndsOnShutdown(t *testing.T) {
	b, s := sqliteWaitServer(t)
	g := b.claimAgent("h")
	ch := b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})
	b.waiting()
	s.StopWaiting()
	require.Empty(t, answered(t, ch).Webhooks)
	// Later heartbeats do not wait either.
	require.Empty(t, answered(t, b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})).Webhooks)
}

// TestWaitEndsWhenItsHostStops: a stopping host says so
// (HeartbeatRequest.Stopping) rather than hang up on its long poll, whose
// answer would be lost with whatever it leased: the poll answers at once,
// leasing nothing more. Another host's poll waits on.
func TestWaitEndsWhenItsHostStops(t *testing.T) {
	b, _ := sqliteWaitServer(t)
	g, other := b.claimAgent("h"), b.claimAgent("other")
	ch := b.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})
	b.waiting()
	otherCh := b.beatAsync(context.Background(), other.token, shared.HeartbeatRequest{WaitS: 30})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 2), "both wait")

	stop := g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), Stopping: true})
	require.Empty(t, stop.Webhooks)
	require.Empty(t, answered(t, ch).Webhooks, "answered without the clock moving")
	b.waiting() // the other host's poll alone
	select {
	case r := <-otherCh:
		t.Fatalf("the other host's poll was answered: %+v", r)
	default:
	}
	id := other.send("d-1")
	hb := answered(t, otherCh)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, id, hb.Webhooks[0].DeliveryID)

	// Stopping takes no work.
	for _, req := range []shared.HeartbeatRequest{
		{Stopping: true},
		{Stopping: true, MaxWebhooks: shared.Ptr(1)},
		{Stopping: true, MaxWebhooks: shared.Ptr(0), WaitS: 5},
	} {
		a := b.heartbeat(g.token, req)
		require.Equal(t, 400, a.status, string(a.body))
		require.Contains(t, string(a.body), "a stopping heartbeat takes no work")
	}
}

func TestWaitLeasesNothingForAClientThatLeft(t *testing.T) {
	b, s := sqliteWaitServer(t)
	g := b.claimAgent("h")
	ctx, cancel := context.WithCancel(context.Background())
	ch := b.beatAsync(ctx, g.token, shared.HeartbeatRequest{WaitS: 30})
	b.waiting()
	cancel()
	require.Error(t, (<-ch).err)
	require.Eventually(t, func() bool {
		return s.deliveries.Waiting() == 0
	}, 10*time.Second, time.Millisecond, "the handler stops waiting")
	id := g.send("d-1")
	d := g.delivery(id)
	require.Equal(t, store.StatusQueued, d.Status, "nobody to hand it to")
	require.Zero(t, d.Attempts)
}

// TestWaitAcrossReplicas: two servers on one Postgres. A heartbeat waits on
// one; the webhook arrives at the other; LISTEN/NOTIFY wakes the first.
func TestWaitAcrossReplicas(t *testing.T) {
	a, b := twoReplicas(t)
	g := a.claimAgent("h")

	ch := a.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})
	a.waiting()
	r := b.sendGitHub(g.id, "d-1", prBody)
	require.Equal(t, 200, r.status, string(r.body))
	hb := answered(t, ch)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, "d-1", hb.Webhooks[0].Headers["x-github-delivery"])
}

// TestWaitEndsWhenItsHostStopsOnAnotherReplica: the stopping heartbeat
// reaches one replica, the long poll waits on the other; LISTEN/NOTIFY
// answers it.
func TestWaitEndsWhenItsHostStopsOnAnotherReplica(t *testing.T) {
	a, b := twoReplicas(t)
	g := a.claimAgent("h")

	ch := a.beatAsync(context.Background(), g.token, shared.HeartbeatRequest{WaitS: 30})
	a.waiting()
	r := b.heartbeat(g.token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), Stopping: true})
	require.Equal(t, 200, r.status, string(r.body))
	require.Empty(t, answered(t, ch).Webhooks, "answered without the clock moving")
}

// twoReplicas is two servers on one Postgres database, each with its
// listener.
func twoReplicas(t *testing.T) (a, b *bundle) {
	url := pgtest.NewDatabase(t)
	open := func() store.Store {
		st, err := postgres.Open(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, _ = waitServer(t, open())
	b, _ = waitServer(t, open())
	return a, b
}
