// Package agent is the host's long-running loop: it heartbeats the cloud,
// reporting the acks and nacks waiting in the ledger's outbox and leasing new
// webhooks, and runs each webhook's handler on a bounded pool of workers,
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
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
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
	Clock        clockwork.Clock
	Logger       *slog.Logger
	// FaultHook, for end-to-end tests only, is called at each Fault* point
	// of processing a webhook whose handler ran, so a test can kill the
	// process exactly there. Nil in normal use.
	FaultHook func(point string)
}

// Cloud is the cloud's host API as the agent uses it (a *cloudapi.Client).
// Its errors carry the cloud's HTTP status as cloudapi.StatusOf reads it:
// 401 and 410 say the token or the credential was refused.
type Cloud interface {
	// Token exchanges the host's credential for a fresh token.
	Token(ctx context.Context, req shared.TokenRequest) (shared.TokenResponse, error)
	// Heartbeat reports outcomes and leases new work, authenticated by token.
	Heartbeat(ctx context.Context, token string, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error)
}

// Ledger is the host's durable record as the agent uses it (a
// *ledger.Ledger): what ran and with what result, and the outbox of acks
// and nacks waiting for the cloud. Concurrent writes share a transaction.
type Ledger interface {
	// DeliveriesDone returns, of the given deliveries, those recorded as
	// done (success or skipped), with their result.
	DeliveriesDone(ctx context.Context, deliveryIDs []string) (map[string]ledger.Result, error)
	// DeliveryRecord commits an outcome with its ack or nack and returns
	// the delivery's local attempts.
	DeliveryRecord(ctx context.Context, p ledger.RecordParams) (int, error)
	// OutboxEnqueue queues an ack or nack on its own.
	OutboxEnqueue(ctx context.Context, ob ledger.OutboxEntry) error
	// OutboxList returns up to limit pending outbox entries, oldest first.
	OutboxList(ctx context.Context, limit int) ([]ledger.OutboxEntry, error)
	// OutboxDelete removes exactly the entries with the given sequence
	// numbers.
	OutboxDelete(ctx context.Context, seqs []int64) error
	// OutboxCount returns the number of pending outbox entries.
	OutboxCount(ctx context.Context) (int, error)
	// Probe commits a write that leaves nothing behind: it fails while the
	// ledger cannot record.
	Probe(ctx context.Context) error
}

// Limits of one heartbeat.
const (
	maxOutboxPerHeartbeat = 1000
	// queuePerWorker sets the smallest lease window: webhooks leased per
	// worker, running or waiting. While the cloud has more and the workers
	// run dry before the next batch arrives, the window doubles up to
	// maxWindow; it falls back once the backlog is gone.
	queuePerWorker = 8
	// maxWindow lets a full batch be leased while the one before it runs.
	maxWindow        = 2 * shared.MaxMaxWebhooks
	defaultFloor     = time.Second
	heartbeatTimeout = time.Minute
	// maxWait bounds wait_s: how long an idle heartbeat asks the cloud to
	// hold it until work arrives (the cloud holds at most 25 s).
	maxWait           = 25 * time.Second
	finalFlushTimeout = 10 * time.Second
	ledgerTimeout     = 30 * time.Second
	// busyInterval bounds the heartbeat interval while webhooks are in
	// flight, so their leases (2 min by default) are extended in time.
	busyInterval = 30 * time.Second
	// extendAfter: a heartbeat extends the lease of a webhook in flight once
	// the cloud granted or extended it this long ago (or one heartbeat
	// interval, if shorter: a cloud with a short RELAY_LEASE goes with short
	// intervals), not on every one of the back-to-back heartbeats of a
	// drain. With busyInterval, a lease is extended at most
	// extendAfter+busyInterval after it was last renewed.
	extendAfter = 10 * time.Second
	// firstRetry is the first delay after a failed heartbeat, doubling on
	// each failure up to MaxBackoff. A cloud restarting on the same address
	// refuses connections for well under a second: retrying after about a
	// quarter of a second (±50 % jitter) finds it back without hosts
	// waiting out a whole second, and costs an unreachable cloud two more
	// refused connections per host than starting at 1 s.
	firstRetry = 250 * time.Millisecond
)

// Agent heartbeats and processes webhooks. Create it with New, then Run it.
type Agent struct {
	opts   Options
	log    *slog.Logger
	clock  clockwork.Clock
	tokens *tokenSource
	wake   chan struct{}  // an outcome was recorded or the configuration changed
	wg     sync.WaitGroup // webhooks started and not yet recorded
	// jobs hands webhooks to idle worker goroutines; quit ends them once
	// Run is done.
	jobs    chan shared.Webhook
	quit    chan struct{}
	workers sync.WaitGroup
	idle    atomic.Int32
	// stopping is set once Run stops taking work.
	stopping atomic.Bool
	// unrecordable is set when an outcome could not be written to the
	// ledger (a full disk): the agent takes no new work — each handler run
	// would be lost and run again — until a probe write succeeds.
	unrecordable atomic.Bool

	// handlerCtx is given to handlers; base outlives it for ledger writes.
	// Both are set by Run before any webhook is dispatched.
	handlerCtx, base context.Context

	mu      sync.Mutex
	sources map[string]Source
	sub     []byte // the subscription to report, as JSON
	subSent []byte // the subscription the cloud last accepted
	// inFlight holds the webhooks leased and not yet recorded, with when
	// the cloud last granted or extended their lease.
	inFlight map[string]time.Time
	// answerLost: the last heartbeat failed, so what its answer leased may
	// not have arrived; the next one says so.
	answerLost bool
	lanes      map[string]*lane
	queued     int    // leased, waiting for a worker (or for the ledger lookup)
	running    int    // handlers running
	seq        uint64 // order of arrival across lanes
	window     int    // how many webhooks may be in flight at once
	starved    bool   // the workers ran dry since the last heartbeat went out
	// cleanup is closed once the last heartbeat's outbox cleanup is done
	// (nil: none ran); only Run's goroutine uses it.
	cleanup       chan struct{}
	lastHeartbeat time.Time
	lastError     string
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
	a := &Agent{
		opts:  opts,
		log:   opts.Logger,
		clock: opts.Clock,
		tokens: &tokenSource{
			cloud: opts.Cloud,
			req:   shared.TokenRequest{HostID: opts.HostID, HostCredential: opts.Credential},
			clock: opts.Clock,
		},
		wake:     make(chan struct{}, 1),
		jobs:     make(chan shared.Webhook),
		quit:     make(chan struct{}),
		inFlight: make(map[string]time.Time),
		lanes:    make(map[string]*lane),
		window:   opts.Workers * queuePerWorker,
	}
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

// LastHeartbeat returns when the last heartbeat succeeded (zero if none).
func (a *Agent) LastHeartbeat() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastHeartbeat
}

// LastHeartbeatError is why the last heartbeat failed ("" if it succeeded).
func (a *Agent) LastHeartbeatError() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastError
}

// Stopping reports whether the agent has stopped taking work.
func (a *Agent) Stopping() bool { return a.stopping.Load() }

// Unrecordable says an outcome could not be recorded in the ledger and no
// write has succeeded since: the agent takes no new work meanwhile.
func (a *Agent) Unrecordable() bool { return a.unrecordable.Load() }

// InFlight returns the number of webhooks leased and not yet recorded.
func (a *Agent) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.inFlight)
}

// Backlog returns how many leased webhooks wait for a worker and how many
// handlers run.
func (a *Agent) Backlog() (queued, running int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queued, a.running
}

// Run heartbeats until ctx is done, then stops taking work, lets running
// handlers finish (up to the grace period), nacks the webhooks that did not
// start, flushes the outbox with a last heartbeat and returns nil. It
// returns an error wrapping ErrRevoked when the cloud refuses the host's
// credential.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("host agent started",
		"host_id", a.opts.HostID, "agent_version", Version, "sources", enabledNames(a.opts.Sources),
		"workers", a.opts.Workers, "heartbeat_interval", a.opts.Interval)

	defer func() {
		close(a.quit)
		a.workers.Wait()
	}()
	// Handlers outlive ctx by the grace period; ledger writes outlive it too.
	a.base = context.WithoutCancel(ctx)
	handlerCtx, cancelHandlers := context.WithCancel(a.base)
	defer cancelHandlers()
	a.handlerCtx = handlerCtx

	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(firstRetry),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(a.opts.MaxBackoff),
		backoff.WithMaxElapsedTime(0), // never give up
	)
	floor := defaultFloor
	lastEarly := false // the last long poll was answered early with nothing to run
	var fatal error
	for ctx.Err() == nil {
		start := a.clock.Now()
		res, err := a.heartbeat(ctx, a.dispatch)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrRevoked) {
			fatal = err
			break
		}
		if err != nil {
			lastEarly = false
			delay := min(bo.NextBackOff(), a.opts.MaxBackoff)
			a.log.Warn("heartbeat failed", "err", err, "retry_in", delay)
			retryAt := a.clock.Now().Add(delay)
			a.sleep(ctx, retryAt, retryAt, false)
			continue
		}
		bo.Reset()
		if res.floor > 0 {
			floor = res.floor
		}
		interval := a.opts.Interval
		if a.InFlight() > 0 {
			interval = min(interval, busyInterval)
		}
		earliest := start.Add(floor)
		next := start.Add(max(interval, floor))
		if res.more || res.outboxMore || res.subPending {
			next = earliest
		}
		// The cloud stopped holding a long poll before wait_s with nothing
		// for this host to run: it is shutting down, or a retry came due
		// and went elsewhere.
		early := res.wait > 0 && a.clock.Since(start) < res.wait && a.InFlight() == 0
		earlyAgain := early && lastEarly
		lastEarly = early
		if res.draining {
			// A backlog waits: the next heartbeat carries the outcomes and
			// asks for more as soon as half the window is free, so the
			// workers never run dry while the cloud has work.
			if !res.outboxMore && !res.subPending {
				next = start.Add(max(interval, floor))
			}
			a.awaitRoom(ctx, next)
			continue
		}
		switch {
		case early:
			// Poll again at once: sleeping out the interval would hold back
			// every webhook accepted meanwhile, after a cloud restart for up
			// to the whole interval. Twice in a row, the cloud's floor
			// applies, so a cloud that does not hold polls is not polled in
			// a loop.
			next = a.clock.Now()
			if earlyAgain {
				next = earliest
			}
		case res.wait > 0 && a.clock.Since(start) >= res.wait:
			// The cloud held a long-poll for all of wait_s: poll again now.
			next = earliest
		case res.wait == 0 && res.canWait && a.InFlight() == 0:
			// That heartbeat only reported (the subscription, or outcomes of
			// work that ran when it left); now idle, the next one long-polls,
			// at once: a held heartbeat is no load on the cloud's floor.
			next = a.clock.Now()
		case res.wait == 0 && a.InFlight() == 0:
			next = earliest
		}
		a.sleep(ctx, next, earliest, true)
	}

	a.stopping.Store(true)
	if fatal != nil {
		a.log.Error("stopping: the cloud refused this host's credential", "err", fatal)
		cancelHandlers()
		a.wg.Wait()
		a.awaitCleanup()
		return fatal
	}
	a.dropQueued()
	a.drain(cancelHandlers)
	a.flush()
	return nil
}

// sleep waits until next, or until earliest once signaled (when wakeable).
// It returns early when ctx is done.
func (a *Agent) sleep(ctx context.Context, next, earliest time.Time, wakeable bool) {
	var wake <-chan struct{}
	if wakeable {
		wake = a.wake
	}
	for {
		d := next.Sub(a.clock.Now())
		if d <= 0 {
			return
		}
		t := a.clock.NewTimer(d)
		if !a.clock.Now().Before(next) {
			// The clock passed next while the timer was being made.
			t.Stop()
			return
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
			return
		case <-wake:
			t.Stop()
			if a.InFlight() == 0 && !a.unrecordable.Load() {
				// The last outcome is recorded and nothing runs: report it
				// now, in a heartbeat that long-polls for the next webhook
				// (a held heartbeat is no load on the cloud's floor).
				return
			}
			if earliest.Before(next) {
				next = earliest
			}
		}
	}
}

// awaitRoom waits until half the lease window is free (or until deadline,
// or ctx is done): outcomes signal the loop as they are recorded.
func (a *Agent) awaitRoom(ctx context.Context, deadline time.Time) {
	var t clockwork.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for !a.roomForMore() {
		if t == nil {
			d := deadline.Sub(a.clock.Now())
			if d <= 0 {
				return
			}
			t = a.clock.NewTimer(d)
			if !a.clock.Now().Before(deadline) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			return
		case <-a.wake:
		}
	}
}

// roomForMore reports whether at least half the lease window (at most a
// full batch) is free.
func (a *Agent) roomForMore() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.window-len(a.inFlight) >= max(1, min(a.window/2, shared.MaxMaxWebhooks))
}

// ledgerCtx bounds one ledger step, on the agent's clock and independent of
// whatever network call or handler ran before it.
func (a *Agent) ledgerCtx() (context.Context, context.CancelFunc) {
	return clockwork.WithTimeout(a.base, a.clock, ledgerTimeout)
}

func (a *Agent) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

type heartbeatResult struct {
	more       bool
	draining   bool // the cloud has more and leased some: come back for it soon
	floor      time.Duration
	outboxMore bool          // outcomes still wait in the outbox
	subPending bool          // the subscription changed meanwhile: report it soon
	wait       time.Duration // the wait_s asked for (0: none)
	canWait    bool          // taking work and able to record it: an idle host's next heartbeat long-polls
}

// heartbeat sends one heartbeat: the outbox's acks and nacks, the extends of
// in-flight work, the subscription if the cloud does not have it yet, and
// hands the leased webhooks to lease (nil: lease nothing). On success it
// deletes from the outbox exactly the entries it sent.
func (a *Agent) heartbeat(ctx context.Context, lease func([]shared.Webhook)) (heartbeatResult, error) {
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()

	a.awaitCleanup() // what the last heartbeat delivered is not listed again
	paused := a.unrecordable.Load() && !a.ledgerWritable()
	outbox, err := a.opts.Ledger.OutboxList(ctx, maxOutboxPerHeartbeat)
	if err != nil {
		return heartbeatResult{}, err
	}
	// Handlers get the raw body only: the parsed copy would double every
	// batch.
	req := shared.HeartbeatRequest{AgentVersion: Version, RawBodyOnly: true}
	seqs := make([]int64, 0, len(outbox))
	for _, ob := range outbox {
		seqs = append(seqs, ob.Seq)
		switch ob.Kind {
		case ledger.OutboxAck:
			req.WebhookAcks = append(req.WebhookAcks, ob.DeliveryID)
		case ledger.OutboxNack:
			req.WebhookNacks = append(req.WebhookNacks, shared.Nack{DeliveryID: ob.DeliveryID, Error: ob.Error, Retryable: ob.Retryable, Attempt: ob.Attempt})
		}
	}
	sentAt := a.clock.Now()
	a.mu.Lock()
	for id, renewed := range a.inFlight {
		if sentAt.Sub(renewed) >= min(extendAfter, a.opts.Interval) {
			req.WebhookExtends = append(req.WebhookExtends, id)
		}
	}
	if a.answerLost {
		// What the lost answer leased is not here: say what is, and the
		// cloud hands the rest out again at once.
		req.AnswerLost = true
		req.WebhooksHeld = slices.Sorted(maps.Keys(a.inFlight))
	}
	free := a.window - len(a.inFlight)
	idle := len(a.inFlight) == 0
	// Dry now, or a worker finds nothing to start before the answer comes:
	// either way the window did not cover this heartbeat's round trip.
	a.starved = a.queued == 0 && a.running < a.opts.Workers
	sub := a.sub
	if sub != nil && !slices.Equal(sub, a.subSent) {
		req.Config = &shared.Subscription{}
		if err := json.Unmarshal(sub, req.Config); err != nil {
			a.mu.Unlock()
			return heartbeatResult{}, fmt.Errorf("subscription: %w", err)
		}
	}
	a.mu.Unlock()
	slices.Sort(req.WebhookExtends)
	if lease == nil || paused {
		free = 0 // stopping, or the ledger cannot record: report outcomes, take no new work
	}
	req.MaxWebhooks = shared.Ptr(min(max(free, 0), shared.MaxMaxWebhooks))
	// Idle, the heartbeat long-polls: the cloud holds
	// it until work for this host arrives (or wait_s passes), so a webhook
	// reaches its handler at once instead of at the next interval. An
	// answer that comes back early and empty is followed by a new long poll
	// at once (early answers in a row: at the cloud's floor).
	// The cloud applies the acks and nacks it carries before it waits.
	if lease != nil && !paused && idle && req.Config == nil {
		req.WaitS = int(min(a.opts.Interval, maxWait) / time.Second)
	}

	resp, err := a.send(ctx, req)
	now := a.clock.Now()
	a.mu.Lock()
	if err != nil {
		a.lastError = err.Error()
		// Whatever the cloud leased to this heartbeat did not arrive.
		a.answerLost = true
		a.mu.Unlock()
		return heartbeatResult{}, err
	}
	a.lastHeartbeat, a.lastError = now, ""
	if req.AnswerLost {
		a.answerLost = false
	}
	if req.Config != nil {
		a.subSent = sub
		a.log.Info("subscription sent to the cloud", "sources", len(req.Config.Webhooks))
	}
	subPending := a.sub != nil && !slices.Equal(a.sub, a.subSent)
	for _, id := range req.WebhookExtends {
		if _, ok := a.inFlight[id]; ok {
			a.inFlight[id] = sentAt
		}
	}
	draining := resp.More && len(resp.Webhooks) > 0 && lease != nil
	switch {
	case draining && a.starved:
		// The workers ran out of work while this heartbeat was on its way
		// and the cloud has more: lease further ahead.
		a.window = min(2*a.window, maxWindow)
	case !resp.More:
		a.window = a.opts.Workers * queuePerWorker
	}
	a.mu.Unlock()
	a.log.Debug("heartbeat", "acks", len(req.WebhookAcks), "nacks", len(req.WebhookNacks),
		"extends", len(req.WebhookExtends), "leased", len(resp.Webhooks), "more", resp.More)
	// The new work goes to the workers first; the outbox cleanup below
	// waits for a commit.
	if len(resp.Webhooks) > 0 {
		if lease == nil {
			for _, w := range resp.Webhooks {
				a.log.Warn("webhook leased while stopping; it returns to the cloud when its lease ends", "delivery_id", w.DeliveryID)
			}
		} else {
			lease(resp.Webhooks)
		}
	}
	// The cloud has the outcomes: their cleanup does not depend on the
	// heartbeat's own deadline, or on the host stopping meanwhile. It
	// commits while the loop waits for room; the next heartbeat waits for it.
	if len(seqs) > 0 {
		done := make(chan struct{})
		a.cleanup = done
		go func() {
			defer close(done)
			delCtx, cancelDel := a.ledgerCtx()
			defer cancelDel()
			if err := a.opts.Ledger.OutboxDelete(delCtx, seqs); err != nil {
				// The entries go out again with the next heartbeat, soon: a
				// repeated ack is harmless.
				a.log.Error("outbox cleanup failed", "err", err)
				a.signal()
			}
		}()
	}
	// Outcomes recorded after the list, or a failed cleanup, signal the loop
	// themselves; only a full list means more is waiting right now.
	return heartbeatResult{
		more:       resp.More,
		draining:   draining,
		floor:      time.Duration(resp.HeartbeatIntervalS) * time.Second,
		outboxMore: len(outbox) == maxOutboxPerHeartbeat,
		subPending: subPending,
		wait:       time.Duration(req.WaitS) * time.Second,
		canWait:    lease != nil && !paused,
	}, nil
}

// awaitCleanup waits for the last heartbeat's outbox cleanup.
func (a *Agent) awaitCleanup() {
	if a.cleanup != nil {
		<-a.cleanup
		a.cleanup = nil
	}
}

// send posts a heartbeat, fetching a fresh token once if the cloud answers 401.
func (a *Agent) send(ctx context.Context, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	token, err := a.tokens.Token(ctx)
	if err != nil {
		return shared.HeartbeatResponse{}, err
	}
	resp, err := a.opts.Cloud.Heartbeat(ctx, token, req)
	if cloudapi.StatusOf(err) == http.StatusUnauthorized {
		a.log.Info("token refused by the cloud; fetching a new one")
		a.tokens.Invalidate()
		if token, err = a.tokens.Token(ctx); err != nil {
			return shared.HeartbeatResponse{}, err
		}
		resp, err = a.opts.Cloud.Heartbeat(ctx, token, req)
	}
	if cloudapi.StatusOf(err) == http.StatusGone {
		return shared.HeartbeatResponse{}, fmt.Errorf("%w: %v", ErrRevoked, err)
	}
	return resp, err
}

// dispatch takes a leased batch: webhooks already in flight are not started
// twice; the others are looked up in the ledger in one query, those already
// done are acked again, and the rest wait on their source's lane.
func (a *Agent) dispatch(ws []shared.Webhook) {
	now := a.clock.Now()
	fresh := make([]*shared.Webhook, 0, len(ws))
	a.mu.Lock()
	for i := range ws {
		w := &ws[i]
		if _, dup := a.inFlight[w.DeliveryID]; dup {
			// The cloud handed it out again (its lease ran out): that is a
			// fresh lease on the run already under way.
			a.inFlight[w.DeliveryID] = now
			a.log.Debug("webhook already in flight; not started twice", "delivery_id", w.DeliveryID)
			continue
		}
		a.inFlight[w.DeliveryID] = now
		fresh = append(fresh, w)
	}
	a.queued += len(fresh)
	a.mu.Unlock()
	if len(fresh) == 0 {
		return
	}

	ids := make([]string, len(fresh))
	for i, w := range fresh {
		ids[i] = w.DeliveryID
	}
	dbCtx, cancel := a.ledgerCtx()
	done, err := a.opts.Ledger.DeliveriesDone(dbCtx, ids)
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		// Without the ledger we cannot tell whether they already ran.
		a.log.Error("ledger lookup failed; leaving the webhooks to be delivered again", "count", len(fresh), "err", err)
		for _, w := range fresh {
			delete(a.inFlight, w.DeliveryID)
		}
		a.queued -= len(fresh)
		return
	}
	for _, w := range fresh {
		if r, ok := done[w.DeliveryID]; ok {
			a.queued--
			a.wg.Add(1)
			go a.ackAgain(*w, r)
			continue
		}
		ln := a.lanes[w.Source]
		if ln == nil {
			ln = &lane{}
			a.lanes[w.Source] = ln
		}
		a.seq++
		ln.queue = append(ln.queue, queued{w: *w, seq: a.seq})
	}
	a.pump()
}

// laneLimit is how many of a source's webhooks may run at once.
func (a *Agent) laneLimit(source string) int {
	if s, ok := a.sources[source]; ok && s.Parallel {
		return max(1, a.opts.Workers-1)
	}
	return 1
}

// pump starts waiting webhooks while workers are free, oldest first among
// the lanes that may run one more. Callers hold a.mu.
func (a *Agent) pump() {
	for !a.stopping.Load() && a.running < a.opts.Workers {
		var pick string
		var oldest uint64
		for name, ln := range a.lanes {
			if len(ln.queue) == 0 || ln.running >= a.laneLimit(name) {
				continue
			}
			if pick == "" || ln.queue[0].seq < oldest {
				pick, oldest = name, ln.queue[0].seq
			}
		}
		if pick == "" {
			if a.queued == 0 {
				a.starved = true
			}
			return
		}
		ln := a.lanes[pick]
		q := ln.queue[0]
		ln.queue[0] = queued{} // let the webhook go once it is done
		ln.queue = ln.queue[1:]
		ln.running++
		a.running++
		a.queued--
		a.wg.Add(1)
		a.start(q.w)
	}
}

// start hands w to an idle worker goroutine, or to a new one. Workers are
// kept between webhooks so that their stacks, grown by decoding payloads,
// are not grown again for each webhook.
func (a *Agent) start(w shared.Webhook) {
	select {
	case a.jobs <- w:
	default:
		a.workers.Add(1)
		go a.worker(w)
	}
}

// worker runs webhooks until Run ends; it stays idle only while fewer than
// Workers others do.
func (a *Agent) worker(w shared.Webhook) {
	defer a.workers.Done()
	for {
		a.work(w)
		if a.idle.Add(1) > int32(a.opts.Workers) {
			a.idle.Add(-1)
			return
		}
		select {
		case w = <-a.jobs:
			a.idle.Add(-1)
		case <-a.quit:
			a.idle.Add(-1)
			return
		}
	}
}

// work runs w's handler on a worker, frees the worker, and records the
// outcome on a goroutine of its own: the next webhook of the lane starts
// while this one's outcome waits for its commit (a group commit with the
// others'). w stays in flight, and its lease extended, until its outcome is
// durable.
func (a *Agent) work(w shared.Webhook) {
	rec := a.run(&w)
	a.mu.Lock()
	ln := a.lanes[w.Source]
	ln.running--
	a.running--
	if ln.running == 0 && len(ln.queue) == 0 {
		delete(a.lanes, w.Source)
	}
	a.pump()
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		a.record(&w, rec)
		a.finish(w.DeliveryID)
	}()
}

// finish takes a webhook out of flight and wakes the loop: an outcome may
// wait in the outbox, and there is room for more.
func (a *Agent) finish(deliveryID string) {
	a.mu.Lock()
	delete(a.inFlight, deliveryID)
	a.mu.Unlock()
	a.signal()
}

// ackAgain queues the ack of a webhook the ledger records as done, without
// running its handler again.
func (a *Agent) ackAgain(w shared.Webhook, prev ledger.Result) {
	defer a.wg.Done()
	defer a.finish(w.DeliveryID)
	ctx, cancel := a.ledgerCtx()
	defer cancel()
	ack := ledger.OutboxEntry{DeliveryID: w.DeliveryID, Kind: ledger.OutboxAck, CreatedAt: a.clock.Now()}
	if err := a.opts.Ledger.OutboxEnqueue(ctx, ack); err != nil {
		a.logWebhook(slog.LevelError, "queue ack again failed", &w, slog.Any("err", err))
		a.ledgerFailed(err)
		return
	}
	a.logWebhook(slog.LevelInfo, "already processed; acking again without running the handler", &w, slog.String("result", string(prev)))
}

func (a *Agent) fault(point string) {
	if a.opts.FaultHook != nil {
		a.opts.FaultHook(point)
	}
}

// logWebhook logs one line about w, building it only when it is logged.
func (a *Agent) logWebhook(level slog.Level, msg string, w *shared.Webhook, attrs ...slog.Attr) {
	if !a.log.Enabled(context.Background(), level) {
		return
	}
	all := make([]slog.Attr, 0, 3+len(attrs))
	all = append(all, slog.String("delivery_id", w.DeliveryID), slog.String("source", w.Source), slog.Int("attempt", w.Attempt))
	a.log.LogAttrs(context.Background(), level, msg, append(all, attrs...)...)
}

// outcome is what a run produced, to be recorded.
type outcome struct {
	entry     ledger.Entry
	retryable bool
	ran       bool // the handler ran (not skipped)
}

// run runs w's handler, or decides to skip it, and returns the outcome to
// record.
func (a *Agent) run(w *shared.Webhook) outcome {
	a.mu.Lock()
	src, known := a.sources[w.Source]
	a.mu.Unlock()
	sum := summary.Of(*w, src.Parser)
	start := a.clock.Now()
	o := outcome{entry: ledger.Entry{
		DeliveryID:    w.DeliveryID,
		Source:        w.Source,
		EventType:     w.EventType,
		EventAction:   w.EventAction,
		ReceivedAt:    w.ReceivedAt,
		CloudAttempt:  w.Attempt,
		CorrelationID: w.CorrelationID,
		Summary:       sum.Text,
		Fields:        sum.Fields,
	}}
	e := &o.entry
	route, routed := pickRoute(src, *w)
	switch {
	case !known || !src.Enabled:
		e.Result, e.Output = ledger.ResultSkipped, "skipped: source not enabled on this host"
	case !shared.EventWanted(src.Events, w.EventType, w.EventAction):
		e.Result, e.Output = ledger.ResultSkipped, "skipped: event not in the source's events"
	case !routed:
		e.Result, e.Output = ledger.ResultSkipped, "skipped: no route for this event"
	default:
		e.Handler = route.Handler.Name()
		a.logWebhook(slog.LevelDebug, "running handler", w, slog.String("handler", e.Handler))
		out := route.Handler.Handle(a.handlerCtx, handler.Job{Webhook: *w, Summary: sum})
		o.ran = true
		a.fault(FaultAfterHandler)
		e.Result = ledger.ResultSuccess
		if !out.OK {
			e.Result, e.Error, o.retryable = ledger.ResultError, out.Error, out.Retryable
		}
		e.Output = out.Output
		if out.ResponseStatus != 0 {
			e.ResponseStatus = &out.ResponseStatus
		}
		e.ExitCode = out.ExitCode
	}
	e.ProcessedAt = a.clock.Now()
	e.DurationMS = e.ProcessedAt.Sub(start).Milliseconds()
	return o
}

// record commits w's outcome with its ack or nack. Its own deadline starts
// now: the handler before it may have run for minutes.
func (a *Agent) record(w *shared.Webhook, o outcome) {
	ctx, cancel := a.ledgerCtx()
	defer cancel()
	e := &o.entry
	attempts, err := a.opts.Ledger.DeliveryRecord(ctx, ledger.RecordParams{Entry: *e, Retryable: o.retryable})
	if err != nil {
		a.logWebhook(slog.LevelError, "recording the outcome failed; the webhook will be delivered again", w, slog.Any("err", err))
		a.ledgerFailed(err)
		return
	}
	a.ledgerRecorded()
	if o.ran {
		a.fault(FaultAfterLedger)
	}
	attrs := []slog.Attr{slog.String("result", string(e.Result)), slog.String("handler", e.Handler),
		slog.Int64("duration_ms", e.DurationMS), slog.Int("local_attempts", attempts), slog.String("summary", e.Summary)}
	switch e.Result {
	case ledger.ResultError:
		a.logWebhook(slog.LevelWarn, "handler failed", w, append(attrs, slog.String("error", e.Error), slog.Bool("retryable", o.retryable))...)
	case ledger.ResultSkipped:
		a.logWebhook(slog.LevelInfo, "webhook skipped", w, append(attrs, slog.String("why", e.Output))...)
	default:
		a.logWebhook(slog.LevelInfo, "webhook processed", w, attrs...)
	}
}

// ledgerFailed notes that the ledger could not record an outcome: until it
// can, the agent takes no new work.
func (a *Agent) ledgerFailed(err error) {
	if !a.unrecordable.Swap(true) {
		a.log.Error("the ledger cannot record outcomes; taking no new work until it can", "err", err)
	}
}

// ledgerRecorded notes that the ledger recorded an outcome.
func (a *Agent) ledgerRecorded() {
	if a.unrecordable.Swap(false) {
		a.log.Info("the ledger records again; taking work")
	}
}

// ledgerWritable probes a ledger that failed to record: true (and the
// agent takes work again) once a write commits.
func (a *Agent) ledgerWritable() bool {
	ctx, cancel := a.ledgerCtx()
	defer cancel()
	if err := a.opts.Ledger.Probe(ctx); err != nil {
		a.log.Debug("the ledger still cannot record", "err", err)
		return false
	}
	a.ledgerRecorded()
	return true
}

// pickRoute returns the first route of src whose events match w.
func pickRoute(src Source, w shared.Webhook) (Route, bool) {
	for _, r := range src.Routes {
		if r.Handler != nil && shared.EventWanted(r.Events, w.EventType, w.EventAction) {
			return r, true
		}
	}
	return Route{}, false
}

// dropQueued nacks the webhooks that wait for a worker when the agent stops:
// the cloud hands them out again at once rather than when their lease ends.
func (a *Agent) dropQueued() {
	a.mu.Lock()
	var dropped []shared.Webhook
	for _, ln := range a.lanes {
		for _, q := range ln.queue {
			dropped = append(dropped, q.w)
			delete(a.inFlight, q.w.DeliveryID)
		}
		ln.queue = nil
	}
	a.queued -= len(dropped)
	a.mu.Unlock()
	if len(dropped) == 0 {
		return
	}
	// Enqueued concurrently, the nacks share a transaction.
	var wg sync.WaitGroup
	for _, w := range dropped {
		wg.Go(func() {
			nack := ledger.OutboxEntry{DeliveryID: w.DeliveryID, Kind: ledger.OutboxNack, Error: "host stopping: not started",
				Retryable: true, Attempt: w.Attempt, CreatedAt: a.clock.Now()}
			ctx, cancel := a.ledgerCtx()
			err := a.opts.Ledger.OutboxEnqueue(ctx, nack)
			cancel()
			if err != nil {
				a.log.Error("nack of a webhook not started failed; it returns when its lease ends", "delivery_id", w.DeliveryID, "err", err)
			}
		})
	}
	wg.Wait()
	a.log.Info("stopping: webhooks not started handed back", "count", len(dropped))
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
func (a *Agent) flush() {
	ctx, cancel := context.WithTimeout(a.base, finalFlushTimeout)
	defer cancel()
	defer a.awaitCleanup()
	a.awaitCleanup()
	n, err := a.opts.Ledger.OutboxCount(ctx)
	if err != nil || n == 0 {
		a.log.Info("host agent stopped", "outbox", n)
		return
	}
	if _, err := a.heartbeat(ctx, nil); err != nil {
		a.log.Warn("final heartbeat failed; the outbox is kept and sent on the next start", "outbox", n, "err", err)
		return
	}
	a.log.Info("host agent stopped; outbox flushed", "sent", n)
}
