package agent

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// backlog plays a cloud with a backlog: heartbeat n leases as many webhooks
// as the host asks for, saying "more" until batches batches went out.
type backlog struct {
	mu      sync.Mutex
	source  string
	batches int
	leased  []string
	served  int // batches handed out
}

func (bl *backlog) answer(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
	if n > bl.batches || req.MaxWebhooks == nil {
		return http.StatusOK, resp
	}
	for range *req.MaxWebhooks {
		w := webhook(fmt.Sprintf("%s:%d:1", bl.source, len(bl.leased)), "push")
		w.Source = bl.source
		resp.Webhooks = append(resp.Webhooks, w)
		bl.leased = append(bl.leased, w.DeliveryID)
	}
	resp.More = n < bl.batches && len(resp.Webhooks) > 0
	bl.served++
	return http.StatusOK, resp
}

func (bl *backlog) servedAll() bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return bl.served == bl.batches
}

func (bl *backlog) all() []string {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return append([]string(nil), bl.leased...)
}

func (a *Agent) leaseWindow() int {
	a.flow.mu.Lock()
	defer a.flow.mu.Unlock()
	return a.flow.window
}

// ackedAll collects acks until every id was acked, moving the clock on
// (past the cloud's floor) whenever no heartbeat comes and nothing is in
// flight.
func (b *testBundle) ackedAll(t *testing.T, ids []string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case hb := <-b.cloud.requests:
			for _, id := range hb.req.WebhookAcks {
				delete(want, id)
			}
		case <-time.After(10 * time.Millisecond):
			if b.agent.InFlight() == 0 {
				// Every outcome is recorded (the clock bounds how long a
				// record may take): the last acks wait for the floor.
				b.clock.Advance(time.Second)
			}
		case <-deadline:
			t.Fatalf("%d never acked", len(want))
		}
	}
}

// TestDrainComesBackAtOnce: while the cloud says "more", the next heartbeat
// goes out as soon as half the window is free, without waiting for the
// cloud's floor or the interval, carrying the outcomes recorded by then; the
// window grows while the workers run dry between batches, and falls back
// once the backlog is gone.
func TestDrainComesBackAtOnce(t *testing.T) {
	t.Parallel()
	bl := &backlog{source: "github", batches: 4}
	b := setup(t, func(b *testBundle) { b.cloud.answer = bl.answer })

	first := b.next(t)
	require.Equal(t, 16, *first.req.MaxWebhooks, "2 workers × 8")
	// No clock moves: heartbeats 2 to 4 go out as soon as there is room.
	var acked []string
	for n := 2; n <= 4; n++ {
		hb := b.next(t)
		require.Equal(t, n, hb.n)
		require.Positive(t, *hb.req.MaxWebhooks)
		acked = append(acked, hb.req.WebhookAcks...)
		if n == 2 {
			require.GreaterOrEqual(t, b.agent.leaseWindow(), 32, "the workers were dry: the window grew")
		}
	}
	require.Subset(t, bl.all(), acked)
	var rest []string
	for _, id := range bl.all() {
		if !slices.Contains(acked, id) {
			rest = append(rest, id)
		}
	}
	b.ackedAll(t, rest)
	require.EqualValues(t, len(bl.all()), b.handler.calls.Load())
	require.Equal(t, 16, b.agent.leaseWindow(), "the backlog is gone")
	for _, id := range bl.all() {
		require.Equal(t, ledger.ResultSuccess, b.result(t, id))
	}
}

// TestDrainKeepsSourceOrder: an ordered source's webhooks run one at a time
// in the order they were leased, across back-to-back batches.
func TestDrainKeepsSourceOrder(t *testing.T) {
	t.Parallel()
	bl := &backlog{source: "github", batches: 5}
	var (
		mu              sync.Mutex
		order           []string
		running, maxRun int
	)
	h := &fakeHandler{fn: func(_ context.Context, w shared.Webhook) handler.Outcome {
		mu.Lock()
		running++
		maxRun = max(maxRun, running)
		order = append(order, w.DeliveryID)
		mu.Unlock()
		runtime.Gosched() // a webhook started meanwhile would be seen
		mu.Lock()
		running--
		mu.Unlock()
		return handler.Outcome{OK: true}
	}}
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{{Handler: h}}}}
		b.opts = func(o *Options) { o.Workers = 4 }
		b.cloud.answer = bl.answer
	})
	b.eventually(t, "every batch leased", bl.servedAll)
	b.ackedAll(t, bl.all())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, bl.all(), order)
	require.Equal(t, 1, maxRun)
}

// TestExtendsSkipFreshLeases: a heartbeat extends only the leases granted
// or extended at least extendAfter ago, not those of work leased a moment
// before.
func TestExtendsSkipFreshLeases(t *testing.T) {
	t.Parallel()
	g := newGate("g")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{{Handler: g}}}}
		b.cloud.answer = serve(hooks("github", 1)...)
	})
	b.next(t)
	expectStart(t, g, "github:0:1")
	// A changed subscription goes out after the cloud's floor.
	b.agent.Reload(b.sources, &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{"github": {Enabled: true}}})
	b.advance(t, time.Second)
	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return hb.req.Config != nil })
	require.Empty(t, hb.req.WebhookExtends, "leased a second ago")
	b.advance(t, busyInterval)
	hb = b.next(t)
	require.Equal(t, []string{"github:0:1"}, hb.req.WebhookExtends)
	b.advance(t, extendAfter/2)
	g.open("github:0:1")
	b.eventually(t, "recorded", func() bool { return b.result(t, "github:0:1") == ledger.ResultSuccess })
}

// TestBatchLookupRunsOnlyNewWebhooks: of a leased batch, the webhooks the
// ledger records as done are acked again without running; the others run.
func TestBatchLookupRunsOnlyNewWebhooks(t *testing.T) {
	t.Parallel()
	done, failed, fresh := webhook("github:done:1", "push"), webhook("github:failed:1", "push"), webhook("github:new:1", "push")
	b := setup(t, func(b *testBundle) {
		for id, r := range map[string]ledger.Result{done.DeliveryID: ledger.ResultSuccess, failed.DeliveryID: ledger.ResultError} {
			_, err := b.ledger.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: ledger.Entry{
				DeliveryID: id, Source: "github", Result: r, ProcessedAt: b.clock.Now(),
			}})
			require.NoError(t, err)
		}
		ob, err := b.ledger.OutboxList(context.Background(), 10)
		require.NoError(t, err)
		require.NoError(t, b.ledger.OutboxDelete(context.Background(), []int64{ob[0].Seq, ob[1].Seq}))
		b.cloud.answer = serve(done, failed, fresh)
	})
	b.next(t)
	b.ackedAll(t, []string{done.DeliveryID, failed.DeliveryID, fresh.DeliveryID})
	require.EqualValues(t, 2, b.handler.calls.Load(), "the failed one runs again, the done one does not")
	e, err := b.ledger.DeliveryGet(context.Background(), failed.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, 2, e.Attempts)
	e, err = b.ledger.DeliveryGet(context.Background(), done.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts)
}

// TestDrainBesidePollWhileBusy: with a cloud that holds polls while
// handlers run, a drain's heartbeats that lease carry no outcomes: those go
// beside them, in heartbeats that lease nothing, so that the cloud's acks
// of one batch and its lease of the next are not one request's work in
// turn. One webhook's handler is held until the backlog is leased, so that
// there is always one running; nothing moves the clock until then.
func TestDrainBesidePollWhileBusy(t *testing.T) {
	t.Parallel()
	const batches = 5
	var (
		mu       sync.Mutex
		leased   []string
		served   int
		withAcks []int // the heartbeats that leased and carried acks
	)
	release := make(chan struct{})
	b := setup(t, func(b *testBundle) {
		// Parallel on three workers: two run while one is held.
		b.sources = map[string]Source{"github": {Enabled: true, Parallel: true, Routes: []Route{{Handler: b.handler}}}}
		b.opts = func(o *Options) { o.Workers = 3 }
		b.handler.fn = func(ctx context.Context, w shared.Webhook) handler.Outcome {
			if w.DeliveryID == "github:0:1" {
				<-release
			}
			return handler.Outcome{OK: true, ResponseStatus: 200}
		}
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			mu.Lock()
			defer mu.Unlock()
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, PollWhileBusy: true}
			if req.MaxWebhooks == nil || *req.MaxWebhooks == 0 || served == batches {
				return http.StatusOK, resp
			}
			for range *req.MaxWebhooks {
				w := webhook(fmt.Sprintf("github:%d:1", len(leased)), "push")
				resp.Webhooks = append(resp.Webhooks, w)
				leased = append(leased, w.DeliveryID)
			}
			served++
			resp.More = served < batches
			if len(req.WebhookAcks) > 0 {
				withAcks = append(withAcks, n)
			}
			return http.StatusOK, resp
		}
	})
	start := b.clock.Now()
	acked := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for released := false; ; {
		mu.Lock()
		all, done := append([]string(nil), leased...), served == batches
		mu.Unlock()
		if done && !released {
			require.Equal(t, start, b.clock.Now(), "the backlog was leased without waiting on the clock")
			close(release)
			released = true
		}
		if released && len(acked) == len(all) {
			break
		}
		select {
		case hb := <-b.cloud.requests:
			for _, id := range hb.req.WebhookAcks {
				acked[id] = true
			}
		case <-time.After(10 * time.Millisecond):
			if released && b.agent.InFlight() == 0 {
				b.clock.Advance(time.Second) // the last acks wait for the floor
			}
		case <-deadline:
			t.Fatalf("%d of %d acked", len(acked), len(all))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, withAcks, "heartbeats that leased and reported")
	for _, id := range leased {
		require.Equal(t, ledger.ResultSuccess, b.result(t, id))
	}
}
