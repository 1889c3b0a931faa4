// Package agent is the host's long-running loop: it heartbeats the cloud,
// reporting the acks and nacks waiting in the ledger's outbox and leasing new
// webhooks, and runs each webhook's handler on a bounded pool of workers,
// recording the outcome in the ledger before it is ever acked.
//
// Effectively once: a delivery whose ledger row says success or skipped is
// never handled again, only acked again; the row and its ack are written in
// one transaction, so a crash between the two cannot lose the ack.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/relaykit/relay/shared"
)

// Version is the agent version reported to the cloud.
const Version = "0.1.0"

// Handler runs one webhook.
type Handler interface {
	// Name describes the handler in the ledger (no secrets).
	Name() string
	// Handle runs the webhook; it must return when ctx is done.
	Handle(ctx context.Context, w shared.Webhook) handler.Outcome
}

// Route is what the host does with one source's webhooks.
type Route struct {
	Enabled bool
	Events  []string // empty: every event
	Handler Handler  // nil for a disabled source
}

// Options configures an Agent. Zero durations and counts take defaults.
type Options struct {
	Cloud        *cloudapi.Client
	HostID       string
	Credential   string
	Ledger       *ledger.Ledger
	Routes       map[string]Route
	Subscription *shared.Subscription
	Interval     time.Duration // own heartbeat interval (default 30 s)
	Workers      int           // concurrent handlers (default 4)
	Grace        time.Duration // how long in-flight handlers may finish on stop (default 10 s)
	MaxBackoff   time.Duration // cap of the retry delay after a failed heartbeat (default 30 s)
	Clock        clockwork.Clock
	Logger       *slog.Logger
}

// Limits of one heartbeat.
const (
	maxOutboxPerHeartbeat = 1000
	queuePerWorker        = 8 // webhooks leased per worker, running or waiting
	defaultFloor          = time.Second
	heartbeatTimeout      = 2 * time.Minute
	finalFlushTimeout     = 10 * time.Second
	ledgerTimeout         = 30 * time.Second
)

// Agent heartbeats and processes webhooks. Create it with New, then Run it.
type Agent struct {
	opts   Options
	log    *slog.Logger
	clock  clockwork.Clock
	tokens *tokenSource
	wake   chan struct{} // an outcome was recorded
	sem    chan struct{} // one slot per running handler
	wg     sync.WaitGroup
	// stopping is set once Run stops taking work.
	stopping atomic.Bool

	mu            sync.Mutex
	inFlight      map[string]struct{} // leased and not yet recorded
	lastHeartbeat time.Time
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
	return &Agent{
		opts:  opts,
		log:   opts.Logger,
		clock: opts.Clock,
		tokens: &tokenSource{
			cloud: opts.Cloud,
			req:   shared.TokenRequest{HostID: opts.HostID, HostCredential: opts.Credential},
			clock: opts.Clock,
		},
		wake:     make(chan struct{}, 1),
		sem:      make(chan struct{}, opts.Workers),
		inFlight: make(map[string]struct{}),
	}
}

// LastHeartbeat returns when the last heartbeat succeeded (zero if none).
func (a *Agent) LastHeartbeat() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastHeartbeat
}

// Stopping reports whether the agent has stopped taking work.
func (a *Agent) Stopping() bool { return a.stopping.Load() }

// InFlight returns the number of webhooks leased and not yet recorded.
func (a *Agent) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.inFlight)
}

// Run heartbeats until ctx is done, then stops taking work, lets in-flight
// handlers finish (up to the grace period), flushes the outbox with a last
// heartbeat and returns nil. It returns an error wrapping ErrRevoked when the
// cloud refuses the host's credential.
func (a *Agent) Run(ctx context.Context) error {
	sources := make([]string, 0, len(a.opts.Routes))
	for name, r := range a.opts.Routes {
		if r.Enabled {
			sources = append(sources, name)
		}
	}
	sort.Strings(sources)
	a.log.Info("host agent started",
		"host_id", a.opts.HostID, "agent_version", Version, "sources", sources,
		"workers", a.opts.Workers, "heartbeat_interval", a.opts.Interval)

	// Handlers outlive ctx by the grace period; ledger writes outlive it too.
	base := context.WithoutCancel(ctx)
	handlerCtx, cancelHandlers := context.WithCancel(base)
	defer cancelHandlers()

	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(time.Second),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(a.opts.MaxBackoff),
		backoff.WithMaxElapsedTime(0), // never give up
	)
	floor := defaultFloor
	var fatal error
	for ctx.Err() == nil {
		start := a.clock.Now()
		res, err := a.heartbeat(ctx, func(w shared.Webhook) { a.dispatch(ctx, handlerCtx, base, w) })
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrRevoked) {
			fatal = err
			break
		}
		if err != nil {
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
		earliest := start.Add(floor)
		next := start.Add(max(a.opts.Interval, floor))
		if res.more || res.outboxLeft > 0 {
			next = earliest
		}
		a.sleep(ctx, next, earliest, true)
	}

	a.stopping.Store(true)
	if fatal != nil {
		a.log.Error("stopping: the cloud refused this host's credential", "err", fatal)
		cancelHandlers()
		a.wg.Wait()
		return fatal
	}
	a.drain(cancelHandlers)
	a.flush(base)
	return nil
}

// sleep waits until next, or until earliest once a new outcome is recorded
// (when wakeable). It returns early when ctx is done.
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
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
			return
		case <-wake:
			t.Stop()
			if earliest.Before(next) {
				next = earliest
			}
		}
	}
}

type heartbeatResult struct {
	more       bool
	floor      time.Duration
	outboxLeft int
}

// heartbeat sends one heartbeat: the outbox's acks and nacks, the extends of
// in-flight work, and hands each leased webhook to lease. On success it
// deletes from the outbox exactly the entries it sent.
func (a *Agent) heartbeat(ctx context.Context, lease func(shared.Webhook)) (heartbeatResult, error) {
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()

	outbox, err := a.opts.Ledger.OutboxList(ctx, maxOutboxPerHeartbeat)
	if err != nil {
		return heartbeatResult{}, err
	}
	req := shared.HeartbeatRequest{
		AgentVersion: Version,
		Config:       a.opts.Subscription,
	}
	seqs := make([]int64, 0, len(outbox))
	for _, ob := range outbox {
		seqs = append(seqs, ob.Seq)
		switch ob.Kind {
		case ledger.OutboxAck:
			req.WebhookAcks = append(req.WebhookAcks, ob.DeliveryID)
		case ledger.OutboxNack:
			req.WebhookNacks = append(req.WebhookNacks, shared.Nack{DeliveryID: ob.DeliveryID, Error: ob.Error, Retryable: ob.Retryable})
		}
	}
	a.mu.Lock()
	for id := range a.inFlight {
		req.WebhookExtends = append(req.WebhookExtends, id)
	}
	free := a.opts.Workers*queuePerWorker - len(a.inFlight)
	a.mu.Unlock()
	slices.Sort(req.WebhookExtends)
	if lease == nil {
		free = 0 // stopping: report outcomes, take no new work
	}
	req.MaxWebhooks = shared.Ptr(min(max(free, 0), shared.MaxMaxWebhooks))

	resp, err := a.send(ctx, req)
	if err != nil {
		return heartbeatResult{}, err
	}
	now := a.clock.Now()
	a.mu.Lock()
	a.lastHeartbeat = now
	a.mu.Unlock()
	if err := a.opts.Ledger.OutboxDelete(ctx, seqs); err != nil {
		// The entries go out again with the next heartbeat: a repeated ack
		// is harmless.
		a.log.Error("outbox cleanup failed", "err", err)
	}
	a.log.Debug("heartbeat", "acks", len(req.WebhookAcks), "nacks", len(req.WebhookNacks),
		"extends", len(req.WebhookExtends), "leased", len(resp.Webhooks), "more", resp.More)
	for _, w := range resp.Webhooks {
		if lease == nil {
			a.log.Warn("webhook leased while stopping; it returns to the cloud when its lease ends", "delivery_id", w.DeliveryID)
			continue
		}
		lease(w)
	}
	left, err := a.opts.Ledger.OutboxCount(ctx)
	if err != nil {
		a.log.Error("outbox count failed", "err", err)
	}
	return heartbeatResult{
		more:       resp.More,
		floor:      time.Duration(resp.HeartbeatIntervalS) * time.Second,
		outboxLeft: left,
	}, nil
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

// dispatch hands w to a worker unless it is already in flight. stop ends the
// wait for a free worker; handlerCtx is given to the handler; base outlives
// both for ledger writes.
func (a *Agent) dispatch(stop, handlerCtx, base context.Context, w shared.Webhook) {
	a.mu.Lock()
	if _, dup := a.inFlight[w.DeliveryID]; dup {
		a.mu.Unlock()
		a.log.Debug("webhook already in flight; not started twice", "delivery_id", w.DeliveryID)
		return
	}
	a.inFlight[w.DeliveryID] = struct{}{}
	a.mu.Unlock()

	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.finish(w.DeliveryID)
		select {
		case a.sem <- struct{}{}:
		case <-stop.Done():
			a.log.Info("webhook not started: stopping; it returns to the cloud when its lease ends", "delivery_id", w.DeliveryID)
			return
		}
		defer func() { <-a.sem }()
		if stop.Err() != nil {
			a.log.Info("webhook not started: stopping; it returns to the cloud when its lease ends", "delivery_id", w.DeliveryID)
			return
		}
		a.process(handlerCtx, base, w)
	}()
}

func (a *Agent) finish(deliveryID string) {
	a.mu.Lock()
	delete(a.inFlight, deliveryID)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// process looks w up in the ledger, runs its handler if needed and records
// the outcome with its ack or nack.
func (a *Agent) process(ctx, base context.Context, w shared.Webhook) {
	log := a.log.With("delivery_id", w.DeliveryID, "source", w.Source, "attempt", w.Attempt)
	dbCtx, cancel := context.WithTimeout(base, ledgerTimeout)
	defer cancel()

	prev, err := a.opts.Ledger.DeliveryGet(dbCtx, w.DeliveryID)
	switch {
	case err == nil && prev.Result.Done():
		ack := ledger.OutboxEntry{DeliveryID: w.DeliveryID, Kind: ledger.OutboxAck, CreatedAt: a.clock.Now()}
		if err := a.opts.Ledger.OutboxEnqueue(dbCtx, ack); err != nil {
			log.Error("queue ack again failed", "err", err)
			return
		}
		log.Info("already processed; acking again without running the handler", "result", prev.Result)
		return
	case err != nil && !errors.Is(err, ledger.ErrNotFound):
		// Without the ledger we cannot tell whether it already ran.
		log.Error("ledger lookup failed; leaving the webhook to be delivered again", "err", err)
		return
	}

	start := a.clock.Now()
	e := ledger.Entry{
		DeliveryID:    w.DeliveryID,
		Source:        w.Source,
		EventType:     w.EventType,
		EventAction:   w.EventAction,
		CorrelationID: w.CorrelationID,
		Summary:       summarize(w),
	}
	var retryable bool
	route, ok := a.opts.Routes[w.Source]
	switch {
	case !ok || !route.Enabled || route.Handler == nil:
		e.Result = ledger.ResultSkipped
		e.Summary = "skipped: source not enabled on this host; " + e.Summary
	case !shared.EventWanted(route.Events, w.EventType, w.EventAction):
		e.Result = ledger.ResultSkipped
		e.Summary = "skipped: event type not subscribed; " + e.Summary
		e.Handler = route.Handler.Name()
	default:
		e.Handler = route.Handler.Name()
		log.Debug("running handler", "handler", e.Handler)
		out := route.Handler.Handle(ctx, w)
		e.Result = ledger.ResultSuccess
		if !out.OK {
			e.Result, e.Error, retryable = ledger.ResultError, out.Error, out.Retryable
		}
		if out.Summary != "" {
			e.Summary += " → " + out.Summary
		}
	}
	e.ProcessedAt = a.clock.Now()
	e.DurationMS = e.ProcessedAt.Sub(start).Milliseconds()

	attempts, err := a.opts.Ledger.DeliveryRecord(dbCtx, ledger.RecordParams{Entry: e, Retryable: retryable})
	if err != nil {
		log.Error("recording the outcome failed; the webhook will be delivered again", "err", err)
		return
	}
	attrs := []any{"result", e.Result, "handler", e.Handler, "duration_ms", e.DurationMS, "local_attempts", attempts}
	if e.Result == ledger.ResultError {
		log.Warn("handler failed", append(attrs, "error", e.Error, "retryable", retryable)...)
		return
	}
	log.Info("webhook processed", attrs...)
}

// drain lets running handlers finish within the grace period, then cancels
// them; webhooks still waiting for a worker are not started.
func (a *Agent) drain(cancelHandlers context.CancelFunc) {
	n := a.InFlight()
	a.log.Info("stopping: no new work; waiting for in-flight handlers", "in_flight", n, "grace", a.opts.Grace)
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
		a.log.Warn("grace period over; canceling handlers", "in_flight", a.InFlight())
		cancelHandlers()
		<-done
	}
}

// flush sends a last heartbeat if the outbox holds outcomes (best effort).
func (a *Agent) flush(base context.Context) {
	ctx, cancel := context.WithTimeout(base, finalFlushTimeout)
	defer cancel()
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
