package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/shared"
)

// The worker pool on its own, with no transport: an ordered source runs one
// webhook at a time, a parallel one on all workers but one, the oldest
// waiting webhook starts first, and a stopped pool starts nothing more and
// hands back what waits.
func TestPoolOrderParallelAndStop(t *testing.T) {
	t.Parallel()
	g := newGate("g")
	var (
		pending sync.WaitGroup
		mu      sync.Mutex
		settled []string
	)
	p := newPool(3, &pending,
		func(w *shared.Webhook) outcome {
			out := g.Handle(context.Background(), handler.Job{Webhook: *w})
			return outcome{ran: true, retryable: out.Retryable}
		},
		func(w *shared.Webhook, o outcome) {
			mu.Lock()
			defer mu.Unlock()
			settled = append(settled, w.DeliveryID)
		})
	defer p.close()
	p.setSources(map[string]Source{"ordered": {Enabled: true}, "par": {Enabled: true, Parallel: true}})

	enqueue := func(settledBefore int, ws ...shared.Webhook) {
		ptrs := make([]*shared.Webhook, len(ws))
		for i := range ws {
			ptrs[i] = &ws[i]
		}
		p.expect(len(ws) + settledBefore)
		p.enqueue(ptrs, settledBefore)
	}
	o := func(id string) shared.Webhook { return shared.Webhook{DeliveryID: id, Source: "ordered"} }
	par := func(id string) shared.Webhook { return shared.Webhook{DeliveryID: id, Source: "par"} }

	enqueue(1, par("p1"), par("p2"), par("p3"), o("o1"), o("o2")) // one expected was done already
	// The parallel lane takes two of the three workers; o1 the third.
	expectStarts(t, g, "p1", "p2", "o1")
	queued, running := p.backlog()
	require.Equal(t, 2, queued)
	require.Equal(t, 3, running)

	// A free worker goes to the ordered lane: p3 is older, but its lane
	// runs all it may.
	g.open("o1")
	expectStarts(t, g, "o2")
	g.open("o2")
	require.Eventually(t, func() bool { _, running := p.backlog(); return running == 2 }, 10*time.Second, time.Millisecond)
	queued, _ = p.backlog()
	require.Equal(t, 1, queued, "p3 waits with a worker free")
	require.Empty(t, g.started)
	g.open("p1")
	expectStarts(t, g, "p3")

	// Stopped, the pool starts nothing more, even on a free worker, and
	// hands back what waits.
	enqueue(0, o("o3"), o("o4"), par("p4"))
	expectStarts(t, g, "o3")
	p.stop()
	g.open("o3")
	require.Eventually(t, func() bool { _, running := p.backlog(); return running == 2 }, 10*time.Second, time.Millisecond)
	require.ElementsMatch(t, []shared.Webhook{o("o4"), par("p4")}, p.takeQueued())
	g.open("p2")
	g.open("p3")
	pending.Wait()
	require.Empty(t, g.started, "nothing started after stop")
	queued, running = p.backlog()
	require.Zero(t, queued)
	require.Zero(t, running)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{"p1", "p2", "p3", "o1", "o2", "o3"}, settled, "each settled once, off its worker")
}
