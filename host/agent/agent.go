// Package agent is the host's long-running loop: it keeps a socket to the
// cloud or heartbeats it (its transport), reporting the acks and nacks
// waiting in the ledger's outbox and taking new webhooks, and runs each webhook's handler on a bounded pool of workers,
// recording the outcome in the ledger before it is ever acked.
//
// Effectively once: a delivery whose ledger row says success or skipped is
// never handled again, only acked again; the row and its ack are written in
// one transaction, so a crash between the two cannot lose the ack. A crash
// while a handler runs, or after it returned but before its row is written,
// runs it again when the cloud hands the webhook out again: that window is
// what the Idempotency-Key given to handlers is for.
//
// Order: a source's webhooks are handled one at a time, in the order the
// cloud handed them out, unless the source is parallel; a source waiting on a
// slow handler holds one worker, never the others.
package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/telemetry"
)

// Version is the agent version reported to the cloud.
const Version = "0.2.0"

// Handler runs one webhook.
type Handler interface {
	// Name describes the handler in the ledger (no secrets).
	Name() string
	// Handle runs the job; it must return when ctx is done.
	Handle(ctx context.Context, job handler.Job) handler.Outcome
}

// Source is what the host does with one source's webhooks.
type Source struct {
	Enabled bool
	Events  []string // the source's own filter; empty: every event
	// Parallel lets the source's webhooks run concurrently (on up to all
	// workers but one); by default they run one at a time, in order.
	Parallel bool
	// Parser names the summary parser ("github", "slack", …); "" detects it.
	Parser string
	Routes []Route // the first route whose events match runs
}

// Route sends some of a source's events to a handler.
type Route struct {
	Events  []string // empty: every event
	Handler Handler
}

// Points at which Options.FaultHook is called.
const (
	FaultAfterHandler = "after-handler" // the handler returned; nothing recorded yet
	FaultAfterLedger  = "after-ledger"  // outcome and ack committed; ack not sent yet
)

// Options configures an Agent. Zero durations and counts take defaults.
type Options struct {
	Cloud        Cloud
	HostID       string
	Credential   string
	Ledger       Ledger
	Sources      map[string]Source
	Subscription *shared.Subscription // sent to the cloud when it changes
	Interval     time.Duration        // own heartbeat interval (default 30 s)
	Workers      int                  // concurrent handlers (default 4)
	Grace        time.Duration        // how long in-flight handlers may finish on stop (default 10 s)
	MaxBackoff   time.Duration        // cap of the retry delay after a failed heartbeat (default 30 s)
	// Transport carries webhooks: TransportHeartbeat (default),
	// TransportWebSocket, or TransportAuto (the socket, heartbeats while
	// it cannot connect). The socket needs a Cloud that is a SocketCloud.
	Transport string
	// Compress says the cloud compresses what it sends (the host config's
	// compress; the Cloud asks for it): shown with the transport.
	Compress bool
	Clock    clockwork.Clock
	Logger   *slog.Logger
	// FaultHook, for end-to-end tests only, is called at each Fault* point
	// of processing a webhook whose handler ran, so a test can kill the
	// process exactly there. Nil in normal use.
	FaultHook func(point string)
	// Observe, when set, is told of each handler run: its source, result
	// (ledger.Result) and duration (the local API's metrics).
	Observe func(source, result string, took time.Duration)
	// Tracer starts each handler run's span in the webhook's trace (nil:
	// none exported).
	Tracer *telemetry.Tracer
}

// Agent heartbeats and processes webhooks. Create it with New, then Run it.
//
// Its parts: the transport brings leased webhooks in and takes outcomes out
// (the heartbeat, with its cadence: heartbeat.go, cadence.go); flow control
// says how many the host can take (flow.go); the worker pool runs them in
// each source's order (pool.go); the recorder writes their outcomes to the
// ledger and its outbox (recorder.go). Only the transport talks to the
// cloud.
type Agent struct {
	opts      Options
	log       *slog.Logger
	clock     clockwork.Clock
	transport Transport
	flow      *flow
	pool      *pool
	rec       *recorder
	wake      chan struct{}  // an outcome was recorded or the configuration changed
	room      chan struct{}  // as wake, for a drain's wait for room (awaitRoom) beside the reporter
	wg        sync.WaitGroup // webhooks started and not yet recorded
	// tokens hands out the host's token, for any transport.
	tokens *tokenSource
	// cloudTime follows the cloud's clock, as the cloud's answers say it.
	cloudTime *cloudTime
	// link follows the transport in use, for Status.
	link *link

	// handlerCtx is given to handlers; set by Run before any webhook is
	// dispatched.
	handlerCtx context.Context

	mu            sync.Mutex
	sources       map[string]Source
	sub           []byte // the subscription to report, as JSON
	lastHeartbeat time.Time
	lastError     string
}

// New returns an Agent for opts.
func New(opts Options) *Agent {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	lk := &link{configured: opts.Transport, compress: opts.Compress, now: opts.Clock.Now}
	opts.Cloud = watchCloud(opts.Cloud, lk)
	a := &Agent{
		link:      lk,
		opts:      opts,
		log:       opts.Logger,
		clock:     opts.Clock,
		flow:      newFlow(opts.Workers, opts.Interval, opts.Logger),
		wake:      make(chan struct{}, 1),
		room:      make(chan struct{}, 1),
		cloudTime: &cloudTime{log: opts.Logger},
	}
	a.rec = &recorder{ledger: opts.Ledger, clock: opts.Clock, log: opts.Logger, fault: a.fault, observe: opts.Observe}
	a.pool = newPool(opts.Workers, &a.wg, a.run, a.settle)
	a.pool.now = opts.Clock.Now
	a.tokens = &tokenSource{
		cloud: opts.Cloud,
		req:   shared.TokenRequest{HostID: opts.HostID, HostCredential: opts.Credential},
		clock: opts.Clock,
		times: a.cloudTime,
	}
	a.transport = newTransport(a, opts)
	a.setConfig(opts.Sources, opts.Subscription)
	return a
}

// Reload replaces the sources and the subscription while the agent runs.
// Webhooks already running keep their handler; a changed subscription goes
// to the cloud with the next heartbeat.
func (a *Agent) Reload(sources map[string]Source, sub *shared.Subscription) {
	a.setConfig(sources, sub)
	a.log.Info("configuration reloaded", "sources", enabledNames(sources))
	a.signal()
}

func (a *Agent) setConfig(sources map[string]Source, sub *shared.Subscription) {
	var subJSON []byte
	if sub != nil {
		// Map keys are sorted: equal subscriptions encode equally.
		subJSON, _ = json.Marshal(sub)
	}
	a.pool.setSources(sources)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sources = sources
	a.sub = subJSON
}

func enabledNames(sources map[string]Source) []string {
	names := make([]string, 0, len(sources))
	for name, s := range sources {
		if s.Enabled {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// Token returns the host's current token, the one the transport uses,
// exchanging the credential for one first if there is none or it is due
// for renewal. An error wraps ErrRevoked when the cloud refuses the
// credential.
func (a *Agent) Token(ctx context.Context) (string, error) { return a.tokens.Token(ctx) }

// LastHeartbeat returns when the last heartbeat succeeded (zero if none).
func (a *Agent) LastHeartbeat() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastHeartbeat
}

// ClockSkew returns how far this host's clock is ahead of the cloud's
// (negative: behind), as the cloud's last answer said, and false until one
// said.
func (a *Agent) ClockSkew() (time.Duration, bool) { return a.cloudTime.skew() }

// CloudNow returns the cloud's time now, as the cloud's last answer said
// it, and false until one said.
func (a *Agent) CloudNow() (time.Time, bool) { return a.cloudTime.at(a.clock.Now()) }

// LastHeartbeatError is why the last heartbeat failed ("" if it succeeded).
func (a *Agent) LastHeartbeatError() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastError
}

// Stopping reports whether the agent has stopped taking work.
func (a *Agent) Stopping() bool { return a.pool.stopping.Load() }

// Unrecordable says an outcome could not be recorded in the ledger and no
// write has succeeded since: the agent takes no new work meanwhile.
func (a *Agent) Unrecordable() bool { return a.rec.unrecordable.Load() }

// InFlight returns the number of webhooks leased and not yet recorded.
func (a *Agent) InFlight() int { return a.flow.count() }

// Backlog returns how many leased webhooks wait for a worker and how many
// handlers run.
func (a *Agent) Backlog() (queued, running int) { return a.pool.backlog() }

// finalFlushTimeout bounds the last heartbeat of a stopping host.
const finalFlushTimeout = 10 * time.Second

// Run heartbeats until ctx is done, then stops taking work, lets running
// handlers finish (up to the grace period), nacks the webhooks that did not
// start, flushes the outbox with a last heartbeat and returns nil. It
// returns an error wrapping ErrRevoked when the cloud refuses the host's
// credential.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("host agent started",
		"host_id", a.opts.HostID, "agent_version", Version, "sources", enabledNames(a.opts.Sources),
		"workers", a.opts.Workers, "heartbeat_interval", a.opts.Interval)

	defer a.pool.close()
	// Handlers outlive ctx by the grace period; ledger writes outlive it too.
	base := context.WithoutCancel(ctx)
	a.rec.base = base
	handlerCtx, cancelHandlers := context.WithCancel(base)
	defer cancelHandlers()
	a.handlerCtx = handlerCtx

	// From the stop on no handler starts: what arrives or waits for a
	// worker meanwhile is handed back.
	defer context.AfterFunc(ctx, a.pool.stop)()
	fatal := a.transport.Run(ctx)
	a.pool.stop()
	if fatal != nil {
		a.log.Error("stopping: the cloud refused this host's credential", "err", fatal)
		cancelHandlers()
		a.wg.Wait()
		return fatal
	}
	a.dropQueued()
	a.drain(cancelHandlers)
	a.flush(base)
	return nil
}

// dropQueued hands back the webhooks that wait for a worker when the agent
// stops: nacked, the cloud hands them out again at once rather than when
// their lease ends.
func (a *Agent) dropQueued() {
	dropped := a.pool.takeQueued()
	if len(dropped) == 0 {
		return
	}
	ids := deliveryIDs(dropped)
	a.flow.release(ids...)
	a.rec.nackNotStarted(dropped)
	a.log.Info("stopping: webhooks not started handed back", "count", len(dropped))
}

// take hands webhooks that reached the host (pushed, or in a heartbeat's
// answer) to the workers, or back to the cloud once it began to stop.
func (a *Agent) take(ws []shared.Webhook) {
	if a.Stopping() {
		a.handBackPushed(ws)
		return
	}
	a.dispatch(ws)
}

// handBackPushed hands back webhooks that reached the host after it began
// to stop, as dropQueued does those waiting for a worker. One in flight
// runs already (pushed again: its outcome reports it); one the ledger
// records as done is acked again, as dispatch would.
func (a *Agent) handBackPushed(ws []shared.Webhook) {
	ws = a.flow.notInFlight(ws)
	if len(ws) == 0 {
		return
	}
	ids := deliveryIDs(ws)
	done, err := a.rec.done(ids)
	if err != nil {
		a.log.Error("ledger lookup failed; webhooks pushed while stopping return when the socket closes", "count", len(ws), "err", err)
		return
	}
	back := ws[:0]
	for _, w := range ws {
		if r, ok := done[w.DeliveryID]; ok {
			a.rec.ackAgain(&w, r)
			continue
		}
		back = append(back, w)
	}
	a.rec.nackNotStarted(back)
	a.log.Info("stopping: webhooks pushed meanwhile handed back", "count", len(back))
}

// drain lets running handlers finish within the grace period, then cancels
// them.
func (a *Agent) drain(cancelHandlers context.CancelFunc) {
	_, running := a.Backlog()
	a.log.Info("stopping: no new work; waiting for running handlers", "running", running, "grace", a.opts.Grace)
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	t := a.clock.NewTimer(a.opts.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.Chan():
		_, running := a.Backlog()
		a.log.Warn("grace period over; canceling handlers", "running", running)
		cancelHandlers()
		<-done
	}
}

// flush sends a last heartbeat if the outbox holds outcomes (best effort).
func (a *Agent) flush(base context.Context) {
	ctx, cancel := context.WithTimeout(base, finalFlushTimeout)
	defer cancel()
	n, err := a.transport.Flush(ctx)
	switch {
	case err != nil:
		a.log.Warn("final heartbeat failed; the outbox is kept and sent on the next start", "outbox", n, "err", err)
	case n == 0:
		a.log.Info("host agent stopped", "outbox", n)
	default:
		a.log.Info("host agent stopped; outbox flushed", "sent", n)
	}
}

// deliveryIDs are the webhooks' delivery ids, in order.
func deliveryIDs(ws []shared.Webhook) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.DeliveryID
	}
	return ids
}
