package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/shared"
)

// Cloud is the cloud's host API as the agent uses it (a *cloudapi.Client).
// Its errors carry the cloud's HTTP status as cloudapi.StatusOf reads it:
// 401 and 410 say the token or the credential was refused.
type Cloud interface {
	// Token exchanges the host's credential for a fresh token.
	Token(ctx context.Context, req shared.TokenRequest) (shared.TokenResponse, error)
	// Heartbeat reports outcomes and leases new work, authenticated by token.
	Heartbeat(ctx context.Context, token string, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error)
}

// Limits of one heartbeat.
const (
	maxOutboxPerHeartbeat = 1000
	heartbeatTimeout      = time.Minute
)

// heartbeats is the heartbeat transport: each heartbeat reports the
// outbox's acks and nacks, the extends of work in flight and the
// subscription if the cloud does not have it yet, and leases as many
// webhooks as flow control has room for; an idle host's heartbeat
// long-polls. When to send the next one is its cadence (cadence.go).
type heartbeats struct {
	a          *Agent
	cloud      Cloud
	tokens     *tokenSource  // the agent's
	interval   time.Duration // the host's own heartbeat interval
	maxBackoff time.Duration
	clock      clockwork.Clock
	log        *slog.Logger

	// Only Run's goroutine, then Flush, use the fields below.
	// answerLost: the last heartbeat failed, so what its answer leased may
	// not have arrived; the next one says so.
	answerLost bool
	subSent    []byte        // the subscription the cloud last accepted
	floor      time.Duration // the cloud's floor, as it last said
	// cleanup is closed once the last heartbeat's outbox cleanup is done
	// (nil: none ran).
	cleanup chan struct{}
	// reporter, when set, reports beside polls while handlers run.
	reporter *reporter
	// retries paces the retries of failed heartbeats (Run). It outlives a
	// Run: the socket's fallback runs heartbeats between its tries of the
	// socket, and a try that fails is no sign the cloud is back, so the
	// wait goes on growing from one Run to the next; started afresh each
	// time, an unreachable cloud got a quick ramp of retries from every
	// host after each of their tries of the socket. A heartbeat or a socket
	// that gets through resets it (cloudReached).
	retries *backoff.ExponentialBackOff
}

// cloudReached resets the heartbeats' backoff: the cloud answered.
func (h *heartbeats) cloudReached() { h.retries.Reset() }

func newHeartbeats(a *Agent, opts Options) *heartbeats {
	return &heartbeats{
		a:          a,
		cloud:      opts.Cloud,
		tokens:     a.tokens,
		interval:   opts.Interval,
		maxBackoff: opts.MaxBackoff,
		retries:    newRetries(opts.MaxBackoff),
		clock:      opts.Clock,
		log:        opts.Logger,
	}
}

// Flush sends a last heartbeat that leases nothing, if the outbox holds
// outcomes or an answer was lost (what it leased is due again at once,
// rather than when its lease ends).
func (h *heartbeats) Flush(ctx context.Context) (int, error) {
	defer h.awaitCleanup()
	h.awaitCleanup()
	n, err := h.a.rec.count(ctx)
	if err != nil || (n == 0 && !h.answerLost) {
		return 0, nil
	}
	if _, err := h.exchange(ctx, false); err != nil {
		return n, err
	}
	return n, nil
}

type heartbeatResult struct {
	more       bool
	draining   bool // the cloud has more and leased some: come back for it soon
	floor      time.Duration
	outboxMore bool          // outcomes still wait in the outbox
	subPending bool          // the subscription changed meanwhile: report it soon
	wait       time.Duration // the wait_s asked for (0: none)
	canWait    bool          // taking work and able to record it: an idle host's next heartbeat long-polls
	// pollWhileBusy: the cloud holds a long poll while handlers run, and
	// takes outcomes in heartbeats beside it.
	pollWhileBusy bool
	busyPoll      bool // it was such a poll (pollWhileBusy's)
	leased        int  // webhooks the answer carried
}

// exchange sends one heartbeat: the outbox's acks and nacks, the extends of
// in-flight work, the subscription if the cloud does not have it yet, and
// hands the leased webhooks to the agent (take false: lease nothing). On
// success it deletes from the outbox exactly the entries it sent.
func (h *heartbeats) exchange(ctx context.Context, take bool) (heartbeatResult, error) {
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	a := h.a

	h.awaitCleanup() // what the last heartbeat delivered is not listed again
	paused := a.rec.paused()
	outbox, err := a.rec.outbox(ctx, maxOutboxPerHeartbeat)
	if err != nil {
		return heartbeatResult{}, err
	}
	// Handlers get the raw body only: the parsed copy would double every
	// batch.
	req := shared.HeartbeatRequest{AgentVersion: Version, RawBodyOnly: true}
	rep := reportOutbox(outbox)
	req.WebhookAcks, req.WebhookNacks, req.WebhookResults = rep.acks, rep.nacks, rep.results
	seqs := rep.seqs
	sentAt := h.clock.Now()
	c := a.flow.credit(sentAt, h.answerLost)
	req.WebhookExtends = c.extends
	if h.answerLost {
		// What the lost answer leased is not here: say what is, and the
		// cloud hands the rest out again at once.
		req.AnswerLost = true
		req.WebhooksHeld = c.held
	}
	// Dry now, or a worker finds nothing to start before the answer comes:
	// either way the window did not cover this heartbeat's round trip.
	a.pool.markDry()
	sub := a.subscription()
	if sub != nil && !slices.Equal(sub, h.subSent) {
		req.Config = &shared.Subscription{}
		if err := json.Unmarshal(sub, req.Config); err != nil {
			return heartbeatResult{}, fmt.Errorf("subscription: %w", err)
		}
	}
	free := c.free
	if !take || paused {
		free = 0 // stopping, or the ledger cannot record: report outcomes, take no new work
	}
	req.MaxWebhooks = shared.Ptr(min(max(free, 0), shared.MaxMaxWebhooks))
	// Idle, the heartbeat long-polls: the cloud holds
	// it until work for this host arrives (or wait_s passes), so a webhook
	// reaches its handler at once instead of at the next interval. An
	// answer that comes back early and empty is followed by a new long poll
	// at once (early answers in a row: at the cloud's floor).
	// The cloud applies the acks and nacks it carries before it waits.
	if take && !paused && c.idle && req.Config == nil {
		req.WaitS = int(min(h.interval, maxWait) / time.Second)
	}

	resp, err := h.send(ctx, req)
	now := h.clock.Now()
	a.contacted(now, err)
	if err != nil {
		// Whatever the cloud leased to this heartbeat did not arrive (one
		// that leases nothing lost nothing).
		if *req.MaxWebhooks > 0 {
			h.answerLost = true
		}
		return heartbeatResult{}, err
	}
	// The cloud's clock and lease, whatever this host's clock says.
	a.cloudTime.observe(now, resp.Now)
	a.flow.setLease(time.Duration(resp.LeaseS) * time.Second)
	if req.AnswerLost {
		h.answerLost = false
	}
	if req.Config != nil {
		h.subSent = sub
		h.log.Info("subscription sent to the cloud", "sources", len(req.Config.Webhooks))
	}
	subPending := a.pendingSub(h.subSent)
	a.flow.extended(req.WebhookExtends, sentAt)
	draining := resp.More && len(resp.Webhooks) > 0 && take
	// The workers ran out of work while this heartbeat was on its way and
	// the cloud has more: lease further ahead.
	a.flow.adjust(draining, a.pool.ranDry(), resp.More)
	h.log.Debug("heartbeat", "acks", len(req.WebhookAcks), "nacks", len(req.WebhookNacks),
		"extends", len(req.WebhookExtends), "leased", len(resp.Webhooks), "more", resp.More)
	// The new work goes to the workers first; the outbox cleanup below
	// waits for a commit.
	if len(resp.Webhooks) > 0 {
		if !take {
			for _, w := range resp.Webhooks {
				h.log.Warn("webhook leased while stopping; it returns to the cloud when its lease ends", "delivery_id", w.DeliveryID)
			}
		} else {
			a.take(resp.Webhooks)
		}
	}
	// The cloud has the outcomes: their cleanup does not depend on the
	// heartbeat's own deadline, or on the host stopping meanwhile. It
	// commits while the loop waits for room; the next heartbeat waits for it.
	if len(seqs) > 0 {
		done := make(chan struct{})
		h.cleanup = done
		go func() {
			defer close(done)
			if err := a.rec.reported(seqs); err != nil {
				// The entries go out again with the next heartbeat, soon: a
				// repeated ack is harmless.
				h.log.Error("outbox cleanup failed", "err", err)
				a.signal()
			}
		}()
	}
	// Outcomes recorded after the list, or a failed cleanup, signal the loop
	// themselves; only a full list means more is waiting right now.
	return heartbeatResult{
		more:          resp.More,
		draining:      draining,
		floor:         time.Duration(resp.HeartbeatIntervalS) * time.Second,
		outboxMore:    len(outbox) == maxOutboxPerHeartbeat,
		subPending:    subPending,
		wait:          time.Duration(req.WaitS) * time.Second,
		canWait:       take && !paused,
		pollWhileBusy: resp.PollWhileBusy,
		leased:        len(resp.Webhooks),
	}, nil
}

// stopWait bounds how long a stopping host waits for the answer of a
// heartbeat it has out, once it asked the cloud to answer at once.
const stopWait = 5 * time.Second

// outliveStop returns the context of a heartbeat that may lease: the host
// stopping (ctx done; or, falling back from its socket, going back to it)
// does not hang up on it, since what its answer leased
// would then be lost to the host and cost those webhooks an attempt no
// handler used. Instead the host tells the cloud it is stopping (sayStopping:
// a long poll it holds answers at once), reads the answer, and hands back
// what it carries as it hands back all it did not start. Only an answer
// that does not come within stopWait is given up (then reported as lost).
// landed ends it once the heartbeat returned. A heartbeat begun after the
// stop gets ctx itself: it is not sent.
func (h *heartbeats) outliveStop(ctx context.Context) (hctx context.Context, landed func()) {
	if ctx.Err() != nil {
		return ctx, func() {}
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done, finished := make(chan struct{}), make(chan struct{})
	unwatch := context.AfterFunc(ctx, func() {
		defer close(finished)
		t := h.clock.NewTimer(stopWait)
		defer t.Stop()
		said := make(chan struct{})
		go func() {
			defer close(said)
			h.sayStopping(hctx)
		}()
		select {
		case <-done:
		case <-t.Chan():
			h.log.Warn("no answer to the heartbeat under way after asking for it; giving it up", "waited", stopWait)
			cancel()
		}
		<-said
	})
	return hctx, func() {
		close(done)
		if !unwatch() {
			<-finished // the stop came: it asked the cloud
		}
		cancel()
	}
}

// sayStopping tells the cloud the host is stopping, so that it answers the
// host's held long poll at once (HeartbeatRequest.Stopping): a heartbeat
// that reports nothing and takes nothing. Best effort: a cloud that does
// not know the field ignores it, and the poll answers when its wait ends.
func (h *heartbeats) sayStopping(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	req := shared.HeartbeatRequest{AgentVersion: Version, MaxWebhooks: shared.Ptr(0), Stopping: true}
	if _, err := h.send(ctx, req); err != nil && ctx.Err() == nil {
		h.log.Warn("could not ask the cloud to answer the heartbeat under way", "err", err)
	}
}

// pollWhileBusy keeps a long poll out while handlers run, with a cloud
// that holds one (HeartbeatResponse.PollWhileBusy): a webhook accepted
// meanwhile is answered at once and waits on its source's lane, instead
// of for the heartbeat that reports the running one. The poll carries no
// outcomes: what is recorded while it is held, the extends that come due
// and a changed subscription go beside it in heartbeats that lease
// nothing and do not wait, sent by the reporter (startReporter), over a
// second connection. The reporter runs on across polls in a row; the
// caller stops it before any other heartbeat, sleep or return. A lost
// answer is said by the next heartbeat after the poll, as ever.
func (h *heartbeats) pollWhileBusy(ctx context.Context) (heartbeatResult, error) {
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	a := h.a
	c := a.flow.credit(h.clock.Now(), false)
	req := shared.HeartbeatRequest{AgentVersion: Version, RawBodyOnly: true,
		MaxWebhooks: shared.Ptr(min(max(c.free, 0), shared.MaxMaxWebhooks)),
		WaitS:       int(min(h.interval, maxWait) / time.Second)}
	a.pool.markDry()
	resp, err := h.send(ctx, req)
	now := h.clock.Now()
	a.contacted(now, err)
	if err != nil {
		// The reporter uses the heartbeats' state: it stops first.
		h.stopReporter()
		h.answerLost = true
		return heartbeatResult{}, err
	}
	if len(resp.Webhooks) > 0 {
		a.take(resp.Webhooks)
	}
	a.cloudTime.observe(now, resp.Now)
	a.flow.setLease(time.Duration(resp.LeaseS) * time.Second)
	draining := resp.More && len(resp.Webhooks) > 0
	a.flow.adjust(draining, a.pool.ranDry(), resp.More)
	h.log.Debug("heartbeat", "leased", len(resp.Webhooks), "more", resp.More, "while_busy", true)
	return heartbeatResult{
		more:     resp.More,
		draining: draining,
		floor:    time.Duration(resp.HeartbeatIntervalS) * time.Second,
		// A changed subscription is the reporter's to send.
		wait:          time.Duration(req.WaitS) * time.Second,
		canWait:       true,
		pollWhileBusy: resp.PollWhileBusy,
		busyPoll:      true,
		leased:        len(resp.Webhooks),
	}, nil
}

// reporter is report running beside polls while handlers run.
type reporter struct {
	stop, done chan struct{}
}

// startReporter starts report, unless it runs.
func (h *heartbeats) startReporter(ctx context.Context) {
	if h.reporter != nil {
		return
	}
	r := &reporter{stop: make(chan struct{}), done: make(chan struct{})}
	h.awaitCleanup() // the reporter's from here on, until it stops
	h.reporter = r
	go func() {
		defer close(r.done)
		h.report(ctx, r.stop)
	}()
}

// stopReporter stops report, if it runs, once the report under way (if
// any) is done: canceling it would close its connection.
func (h *heartbeats) stopReporter() {
	if h.reporter == nil {
		return
	}
	close(h.reporter.stop)
	<-h.reporter.done
	h.reporter = nil
}

// report sends, until stop is closed, a heartbeat that leases nothing
// whenever there is something to report: outcomes recorded (the agent's
// wake), leases due for an extend (checked every busy interval), a changed
// subscription. It runs beside pollWhileBusy's polls; while it runs, it
// alone uses the heartbeats' state (the outbox cleanup, the subscription
// sent, answerLost).
func (h *heartbeats) report(ctx context.Context, stop <-chan struct{}) {
	a := h.a
	due := func() bool {
		if n, err := a.rec.count(ctx); err == nil && n > 0 {
			return true
		}
		return a.pendingSub(h.subSent) || len(a.flow.credit(h.clock.Now(), false).extends) > 0
	}
	for {
		if due() {
			if _, err := h.exchange(ctx, false); err != nil {
				// Tried again with the next outcome, or after the poll.
				h.log.Warn("heartbeat failed", "err", err)
			}
		}
		t := h.clock.NewTimer(a.flow.busy())
		select {
		case <-stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.wake:
		case <-t.Chan():
		}
		t.Stop()
	}
}

// awaitCleanup waits for the last heartbeat's outbox cleanup.
func (h *heartbeats) awaitCleanup() {
	if h.cleanup != nil {
		<-h.cleanup
		h.cleanup = nil
	}
}

// send posts a heartbeat, fetching a fresh token once if the cloud answers 401.
func (h *heartbeats) send(ctx context.Context, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	token, err := h.tokens.Token(ctx)
	if err != nil {
		return shared.HeartbeatResponse{}, err
	}
	resp, err := h.cloud.Heartbeat(ctx, token, req)
	if cloudapi.StatusOf(err) == http.StatusUnauthorized {
		h.log.Info("token refused by the cloud; fetching a new one")
		h.tokens.Invalidate()
		if token, err = h.tokens.Token(ctx); err != nil {
			return shared.HeartbeatResponse{}, err
		}
		resp, err = h.cloud.Heartbeat(ctx, token, req)
	}
	if cloudapi.StatusOf(err) == http.StatusGone {
		return shared.HeartbeatResponse{}, fmt.Errorf("%w: %v", ErrRevoked, err)
	}
	return resp, err
}
