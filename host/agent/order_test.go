package agent

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// gate is a handler that reports each start and holds it until released.
type gate struct {
	name    string
	started chan string
	mu      sync.Mutex
	release map[string]chan struct{}
	running int
	maxSeen int
}

func newGate(name string) *gate {
	return &gate{name: name, started: make(chan string, 100), release: map[string]chan struct{}{}}
}

func (g *gate) ch(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release[id] == nil {
		g.release[id] = make(chan struct{})
	}
	return g.release[id]
}

func (g *gate) Name() string { return g.name }

func (g *gate) Handle(ctx context.Context, job handler.Job) handler.Outcome {
	g.mu.Lock()
	g.running++
	g.maxSeen = max(g.maxSeen, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	g.started <- job.Webhook.DeliveryID
	select {
	case <-g.ch(job.Webhook.DeliveryID):
		return handler.Outcome{OK: true}
	case <-ctx.Done():
		return handler.Outcome{Retryable: true, Error: "canceled"}
	}
}

func (g *gate) open(id string) { close(g.ch(id)) }

func (g *gate) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxSeen
}

func expectStart(t *testing.T, g *gate, want string) {
	t.Helper()
	select {
	case got := <-g.started:
		require.Equal(t, want, got)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not start", want)
	}
}

// expectStarts waits for the given starts, in any order (they run concurrently).
func expectStarts(t *testing.T, g *gate, want ...string) {
	t.Helper()
	var got []string
	for range want {
		select {
		case id := <-g.started:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v of %v started", got, want)
		}
	}
	require.ElementsMatch(t, want, got)
}

func expectNoStart(t *testing.T, g *gate, b *testBundle) {
	t.Helper()
	// Once the agent sleeps on its clock after the batch, every webhook that
	// could start has been handed to a worker; give the workers a moment.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	select {
	case id := <-g.started:
		t.Fatalf("%s started, but should wait", id)
	case <-time.After(50 * time.Millisecond):
	}
}

func hooks(source string, n int) []shared.Webhook {
	var ws []shared.Webhook
	for i := range n {
		w := webhook(fmt.Sprintf("%s:%d:1", source, i), "push")
		w.Source = source
		ws = append(ws, w)
	}
	return ws
}

// TestSourceInOrderAndOthersNotStalled: a source's webhooks run one at a
// time in the order they were leased, while another source's webhook runs
// on another worker meanwhile.
func TestSourceInOrderAndOthersNotStalled(t *testing.T) {
	t.Parallel()
	slow, fast := newGate("slow"), newGate("fast")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{
			"github": {Enabled: true, Routes: []Route{{Handler: slow}}},
			"stripe": {Enabled: true, Routes: []Route{{Handler: fast}}},
		}
		b.opts = func(o *Options) { o.Workers = 4 }
		b.cloud.answer = serve(append(hooks("github", 3), hooks("stripe", 2)...)...)
	})
	b.next(t)
	expectStart(t, slow, "github:0:1")
	// stripe is not held up by github's slow handler, and runs in order too.
	expectStart(t, fast, "stripe:0:1")
	expectNoStart(t, fast, b)
	fast.open("stripe:0:1")
	expectStart(t, fast, "stripe:1:1")
	fast.open("stripe:1:1")
	b.eventually(t, "stripe done", func() bool { return b.result(t, "stripe:1:1") == ledger.ResultSuccess })

	expectNoStart(t, slow, b)
	queued, running := b.agent.Backlog()
	require.Equal(t, 2, queued)
	require.Equal(t, 1, running)
	for i := range 3 {
		if i > 0 {
			expectStart(t, slow, fmt.Sprintf("github:%d:1", i))
		}
		slow.open(fmt.Sprintf("github:%d:1", i))
	}
	b.eventually(t, "github done", func() bool { return b.result(t, "github:2:1") == ledger.ResultSuccess })
	require.Equal(t, 1, slow.max())
	require.Equal(t, 1, fast.max())
}

// TestParallelSourceLeavesAWorker: a parallel source runs several webhooks
// at once but never takes the last worker, so another source still runs.
func TestParallelSourceLeavesAWorker(t *testing.T) {
	t.Parallel()
	par, other := newGate("par"), newGate("other")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{
			"github": {Enabled: true, Parallel: true, Routes: []Route{{Handler: par}}},
			"stripe": {Enabled: true, Routes: []Route{{Handler: other}}},
		}
		b.opts = func(o *Options) { o.Workers = 3 }
		// github's five arrive first and would fill every worker.
		b.cloud.answer = serve(append(hooks("github", 5), hooks("stripe", 1)...)...)
	})
	b.next(t)
	expectStarts(t, par, "github:0:1", "github:1:1")
	expectStart(t, other, "stripe:0:1")
	expectNoStart(t, par, b)
	require.Equal(t, 2, par.max())

	// The freed worker goes to github's next, oldest first.
	other.open("stripe:0:1")
	par.open("github:0:1")
	expectStart(t, par, "github:2:1")
	for _, id := range []string{"github:1:1", "github:2:1"} {
		par.open(id)
	}
	expectStarts(t, par, "github:3:1", "github:4:1")
	par.open("github:3:1")
	par.open("github:4:1")
	b.eventually(t, "all done", func() bool { return b.result(t, "github:4:1") == ledger.ResultSuccess })
	require.Equal(t, 2, par.max())
}

// TestWorkersBoundConcurrency: with more sources than workers, no more than
// Workers handlers ever run at once.
func TestWorkersBoundConcurrency(t *testing.T) {
	t.Parallel()
	g := newGate("g")
	var ws []shared.Webhook
	sources := map[string]Source{}
	for i := range 4 {
		name := fmt.Sprintf("s%d", i)
		sources[name] = Source{Enabled: true, Routes: []Route{{Handler: g}}}
		ws = append(ws, hooks(name, 1)...)
	}
	b := setup(t, func(b *testBundle) {
		b.sources = sources
		b.cloud.answer = serve(ws...) // 2 workers
	})
	b.next(t)
	first := []string{<-g.started, <-g.started}
	expectNoStart(t, g, b)
	g.open(first[0])
	third := <-g.started
	g.open(first[1])
	fourth := <-g.started
	require.ElementsMatch(t, []string{"s0:0:1", "s1:0:1", "s2:0:1", "s3:0:1"}, []string{first[0], first[1], third, fourth})
	g.open(third)
	g.open(fourth)
	b.eventually(t, "all recorded", func() bool {
		for _, w := range ws {
			if b.result(t, w.DeliveryID) != ledger.ResultSuccess {
				return false
			}
		}
		return true
	})
	require.Equal(t, 2, g.max())
}

// TestRoutes: the first route whose events match runs; an event no route
// takes is skipped and acked; the handler gets the summary with the job.
func TestRoutes(t *testing.T) {
	t.Parallel()
	prs, rest := &fakeHandler{jobs: make(chan handler.Job, 10)}, &fakeHandler{}
	opened := webhook("github:pr:1", "pull_request")
	closed := webhook("github:pr:2", "pull_request")
	closed.EventAction = "closed"
	push := webhook("github:push:1", "push")
	issue := webhook("github:issue:1", "issues")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{
			{Events: []string{"pull_request.opened"}, Handler: prs},
			{Events: []string{"push", "pull_request"}, Handler: rest},
		}}}
		b.cloud.answer = serve(opened, closed, push, issue)
	})
	b.next(t)
	b.eventually(t, "all recorded", func() bool {
		return b.result(t, opened.DeliveryID) == ledger.ResultSuccess && b.result(t, closed.DeliveryID) == ledger.ResultSuccess &&
			b.result(t, push.DeliveryID) == ledger.ResultSuccess && b.result(t, issue.DeliveryID) == ledger.ResultSkipped
	})
	require.EqualValues(t, 1, prs.calls.Load())
	require.EqualValues(t, 2, rest.calls.Load())
	job := <-prs.jobs
	require.Equal(t, opened.DeliveryID, job.Webhook.DeliveryID)
	require.Equal(t, "pull_request.opened acme/app #7", job.Summary.Text)
	require.Equal(t, "7", job.Summary.Fields["github.number"])
	e, err := b.ledger.DeliveryGet(context.Background(), issue.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, `skipped: no route of source "github" takes event "issues.opened"`, e.Output)
	require.Equal(t, `no route of source "github" takes event "issues.opened"`, e.Error, "the reason goes to the cloud with the result")
	require.Empty(t, e.Handler)
}

// TestStopNacksWebhooksNotStarted: on stop, the running handler finishes and
// is acked; the webhooks still waiting behind it are handed back at once,
// their nacks saying they never started.
func TestStopNacksWebhooksNotStarted(t *testing.T) {
	t.Parallel()
	g := newGate("g")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{{Handler: g}}}}
		b.cloud.answer = serve(hooks("github", 3)...)
	})
	b.next(t)
	expectStart(t, g, "github:0:1")
	b.cancel()
	b.eventually(t, "stopping", b.agent.Stopping)
	g.open("github:0:1")
	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{"github:0:1"}, hb.req.WebhookAcks)
	require.ElementsMatch(t, []shared.Nack{
		{DeliveryID: "github:1:1", Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
		{DeliveryID: "github:2:1", Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
	}, hb.req.WebhookNacks, "each names the attempt it hands back, and says it never started")
	require.Empty(t, hb.req.WebhookExtends)
	b.stopped(t)
	require.Empty(t, g.started, "nothing else started")
}

// TestFaultHookPoints: the test-only hook sees both points, in order, for a
// webhook whose handler ran, and none for a skipped one.
func TestFaultHookPoints(t *testing.T) {
	t.Parallel()
	points := make(chan string, 10)
	b := setup(t, func(b *testBundle) {
		b.opts = func(o *Options) {
			o.FaultHook = func(p string) {
				// At "after-ledger" the row is committed; at "after-handler" not yet.
				_, err := b.ledger.DeliveryGet(context.Background(), "github:a:1")
				points <- fmt.Sprintf("%s recorded=%v", p, err == nil)
			}
		}
		b.cloud.answer = serve(webhook("github:skip:1", "issues"), webhook("github:a:1", "push"))
	})
	b.next(t)
	b.eventually(t, "recorded", func() bool { return b.result(t, "github:a:1") == ledger.ResultSuccess })
	require.Equal(t, "after-handler recorded=false", <-points)
	require.Equal(t, "after-ledger recorded=true", <-points)
	require.Empty(t, points)
}

// TestBusyHostHeartbeatsOftenEnoughToExtend: with a long own interval, the
// host still comes back within busyInterval while a handler runs, carrying
// the extend.
func TestBusyHostHeartbeatsOftenEnoughToExtend(t *testing.T) {
	t.Parallel()
	g := newGate("g")
	b := setup(t, func(b *testBundle) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{{Handler: g}}}}
		b.opts = func(o *Options) { o.Interval = 10 * time.Minute }
		b.cloud.answer = serve(hooks("github", 1)...)
	})
	b.next(t)
	expectStart(t, g, "github:0:1")
	b.advance(t, busyInterval)
	hb := b.next(t)
	require.Equal(t, []string{"github:0:1"}, hb.req.WebhookExtends)
	g.open("github:0:1")
	b.eventually(t, "recorded", func() bool { return b.result(t, "github:0:1") == ledger.ResultSuccess })
}

// TestHeartbeatErrorReported: the last failure is kept for /healthz until a
// heartbeat succeeds again.
func TestHeartbeatErrorReported(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) {
		b.cloud.answer = failFirst(http.StatusServiceUnavailable)
	})
	b.next(t)
	b.eventually(t, "error kept", func() bool { return b.agent.LastHeartbeatError() != "" })
	require.Contains(t, b.agent.LastHeartbeatError(), "503")
	b.advance(t, 30*time.Second)
	b.next(t)
	b.eventually(t, "error cleared", func() bool { return b.agent.LastHeartbeatError() == "" })
	require.False(t, b.agent.LastHeartbeat().IsZero())
}
