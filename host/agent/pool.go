package agent

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/shared"
)

// pool runs webhooks on a bounded set of workers. A source's webhooks wait
// on its lane and run one at a time in arrival order, unless the source is
// parallel; a lane waiting on a slow handler holds one worker, never the
// others. The pool knows nothing of how webhooks come in or where their
// outcomes go: it runs handle on a worker and settle off it.
type pool struct {
	workers int
	// handle runs w's handler on a worker; settle records what it returned,
	// off the worker, and takes w out of flight.
	handle func(w *shared.Webhook) outcome
	settle func(w *shared.Webhook, o outcome)
	// pending counts webhooks started and not yet settled.
	pending *sync.WaitGroup

	// jobs hands webhooks to idle worker goroutines, and outcomes to idle
	// settling ones; quit ends them.
	jobs        chan shared.Webhook
	outcomes    chan settling
	quit        chan struct{}
	goroutines  sync.WaitGroup // worker and settling goroutines
	idle        atomic.Int32
	idleSettles atomic.Int32
	// stopping is set once the pool starts nothing more.
	stopping atomic.Bool

	mu       sync.Mutex
	parallel map[string]bool // sources whose webhooks may run concurrently
	lanes    map[string]*lane
	queued   int    // taken in, waiting for a worker (or for the ledger lookup)
	busy     int    // handlers running
	seq      uint64 // order of arrival across lanes
	// runs holds the handlers running, for the local page; now times
	// their start (nil: not timed).
	runs map[string]RunningWebhook
	now  func() time.Time
	// dry: the workers ran out of work since markDry (flow control leases
	// further ahead when they do).
	dry bool
}

// lane holds one source's webhooks waiting for a worker, in arrival order.
type lane struct {
	queue   []queued
	running int
}

type queued struct {
	w   shared.Webhook
	seq uint64
}

// settling is a webhook's outcome on its way to settle.
type settling struct {
	w shared.Webhook
	o outcome
}

func newPool(workers int, pending *sync.WaitGroup, handle func(*shared.Webhook) outcome, settle func(*shared.Webhook, outcome)) *pool {
	return &pool{
		workers:  workers,
		handle:   handle,
		settle:   settle,
		pending:  pending,
		jobs:     make(chan shared.Webhook),
		outcomes: make(chan settling),
		quit:     make(chan struct{}),
		lanes:    make(map[string]*lane),
		runs:     make(map[string]RunningWebhook),
	}
}

// setSources notes which sources run in parallel.
func (p *pool) setSources(sources map[string]Source) {
	parallel := make(map[string]bool)
	for name, s := range sources {
		if s.Parallel {
			parallel[name] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parallel = parallel
}

// backlog returns how many webhooks wait for a worker and how many
// handlers run.
func (p *pool) backlog() (queued, running int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued, p.busy
}

// expect counts n webhooks on their way to a lane (negative: n fewer).
func (p *pool) expect(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queued += n
}

// enqueue puts ws on their sources' lanes and starts what it can; settled
// more of those expected will not come (they were done already).
func (p *pool) enqueue(ws []*shared.Webhook, settled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queued -= settled
	for _, w := range ws {
		ln := p.lanes[w.Source]
		if ln == nil {
			ln = &lane{}
			p.lanes[w.Source] = ln
		}
		p.seq++
		ln.queue = append(ln.queue, queued{w: *w, seq: p.seq})
	}
	p.pump()
}

// markDry starts watching whether the workers run dry: they are now, or
// they find nothing to start before ranDry is asked.
func (p *pool) markDry() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dry = p.queued == 0 && p.busy < p.workers
}

// ranDry reports whether the workers ran dry since markDry.
func (p *pool) ranDry() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dry
}

// laneLimit is how many of a source's webhooks may run at once.
func (p *pool) laneLimit(source string) int {
	if p.parallel[source] {
		return max(1, p.workers-1)
	}
	return 1
}

// pump starts waiting webhooks while workers are free, oldest first among
// the lanes that may run one more. Callers hold p.mu.
func (p *pool) pump() {
	for !p.stopping.Load() && p.busy < p.workers {
		var pick string
		var oldest uint64
		for name, ln := range p.lanes {
			if len(ln.queue) == 0 || ln.running >= p.laneLimit(name) {
				continue
			}
			if pick == "" || ln.queue[0].seq < oldest {
				pick, oldest = name, ln.queue[0].seq
			}
		}
		if pick == "" {
			if p.queued == 0 {
				p.dry = true
			}
			return
		}
		ln := p.lanes[pick]
		q := ln.queue[0]
		ln.queue[0] = queued{} // let the webhook go once it is done
		ln.queue = ln.queue[1:]
		ln.running++
		p.busy++
		p.queued--
		p.pending.Add(1)
		r := RunningWebhook{DeliveryID: q.w.DeliveryID, Source: q.w.Source, EventType: q.w.EventType,
			EventAction: q.w.EventAction, Attempt: q.w.Attempt}
		if p.now != nil {
			r.Started = p.now()
		}
		p.runs[q.w.DeliveryID] = r
		p.start(q.w)
	}
}

// start hands w to an idle worker goroutine, or to a new one. Workers are
// kept between webhooks so that their stacks, grown by decoding payloads,
// are not grown again for each webhook.
func (p *pool) start(w shared.Webhook) {
	select {
	case p.jobs <- w:
	default:
		p.goroutines.Add(1)
		go p.worker(w)
	}
}

// worker runs webhooks until the pool is closed; it stays idle only while
// fewer than workers others do.
func (p *pool) worker(w shared.Webhook) {
	defer p.goroutines.Done()
	for {
		p.work(w)
		var ok bool
		if w, ok = linger(p, &p.idle, p.jobs); !ok {
			return
		}
	}
}

// linger keeps a pool goroutine, counted in idle, for its next job from
// next while no more than workers others wait there; ok is false when it
// is to end instead (enough wait already, or the pool is closed).
func linger[T any](p *pool, idle *atomic.Int32, next <-chan T) (job T, ok bool) {
	if idle.Add(1) > int32(p.workers) {
		idle.Add(-1)
		return job, false
	}
	defer idle.Add(-1)
	select {
	case job = <-next:
		return job, true
	case <-p.quit:
		return job, false
	}
}

// work runs w's handler on a worker, frees the worker, and settles the
// outcome on another goroutine (settler): the next webhook of the lane starts
// while this one's outcome waits for its commit (a group commit with the
// others'). w stays in flight, and its lease extended, until its outcome is
// durable.
func (p *pool) work(w shared.Webhook) {
	o := p.handle(&w)
	p.mu.Lock()
	ln := p.lanes[w.Source]
	ln.running--
	p.busy--
	delete(p.runs, w.DeliveryID)
	if ln.running == 0 && len(ln.queue) == 0 {
		delete(p.lanes, w.Source)
	}
	p.pump()
	p.mu.Unlock()
	select {
	case p.outcomes <- settling{w: w, o: o}:
	default:
		p.goroutines.Add(1)
		go p.settler(settling{w: w, o: o})
	}
}

// settler settles outcomes until the pool is closed; it stays idle only
// while fewer than workers others do. Like workers, settling goroutines
// are kept between outcomes: one started for each grew its stack anew on
// the way to the ledger and the log.
func (p *pool) settler(s settling) {
	defer p.goroutines.Done()
	for {
		p.settle(&s.w, s.o)
		s = settling{}
		p.pending.Done()
		var ok bool
		if s, ok = linger(p, &p.idleSettles, p.outcomes); !ok {
			return
		}
	}
}

// stop starts nothing more.
func (p *pool) stop() { p.stopping.Store(true) }

// takeQueued takes the webhooks that wait for a worker off their lanes and
// returns them.
func (p *pool) takeQueued() []shared.Webhook {
	p.mu.Lock()
	defer p.mu.Unlock()
	var dropped []shared.Webhook
	for _, ln := range p.lanes {
		for _, q := range ln.queue {
			dropped = append(dropped, q.w)
		}
		ln.queue = nil
	}
	p.queued -= len(dropped)
	return dropped
}

// close ends the idle worker and settling goroutines once nothing runs.
func (p *pool) close() {
	close(p.quit)
	p.goroutines.Wait()
}
