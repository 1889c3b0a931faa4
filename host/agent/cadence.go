package agent

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jonboulle/clockwork"
)

// The heartbeat's cadence: when the next heartbeat goes out.
const (
	defaultFloor = time.Second
	// maxWait bounds wait_s: how long an idle heartbeat asks the cloud to
	// hold it until work arrives (the cloud holds at most 25 s).
	maxWait = 25 * time.Second
	// busyInterval bounds the heartbeat interval while webhooks are in
	// flight, so their leases (2 min by default) are extended in time.
	busyInterval = 30 * time.Second
	// firstRetry is the first delay after a failed heartbeat, doubling on
	// each failure up to MaxBackoff. A cloud restarting on the same address
	// refuses connections for well under a second: retrying after about a
	// quarter of a second (±50 % jitter) finds it back without hosts
	// waiting out a whole second, and costs an unreachable cloud two more
	// refused connections per host than starting at 1 s.
	firstRetry = 250 * time.Millisecond
)

// newRetries is the heartbeats' backoff: from firstRetry, doubling with
// ±50 % jitter, up to most, never giving up.
func newRetries(most time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(firstRetry),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(most),
		backoff.WithMaxElapsedTime(0),
	)
}

// Run heartbeats until ctx is done or the cloud refuses the host's
// credential. After a success the next heartbeat goes out after the host's
// interval (busyInterval while work is in flight), never sooner than the
// cloud's floor after the last one left, and sooner when there is news: at
// once to long-poll when idle, as soon as half the lease window is free
// while the cloud has a backlog, at the floor when outcomes or a changed
// subscription wait. A failed heartbeat is retried with exponential
// backoff and jitter (h.retries, which carries over from one Run to the
// next), reset by a success.
func (h *heartbeats) Run(ctx context.Context) error {
	bo := h.retries
	floor := defaultFloor
	lastEarly := false // the last long poll was answered early with nothing to run
	busyPoll := false  // the next heartbeat is a poll while handlers run
	for ctx.Err() == nil {
		start := h.clock.Now()
		var res heartbeatResult
		var err error
		hctx, landed := h.outliveStop(ctx)
		if busyPoll && h.a.flow.count() > 0 {
			h.startReporter(ctx)
			res, err = h.pollWhileBusy(hctx)
		} else {
			h.stopReporter()
			res, err = h.exchange(hctx, true)
		}
		landed()
		busyPoll = false
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrRevoked) {
			h.stopReporter()
			h.awaitCleanup()
			return err
		}
		if err != nil {
			lastEarly = false
			delay := min(bo.NextBackOff(), h.maxBackoff)
			h.log.Warn("heartbeat failed", "err", err, "retry_in", delay)
			retryAt := h.clock.Now().Add(delay)
			h.sleep(ctx, retryAt, retryAt, false)
			continue
		}
		bo.Reset()
		if res.floor > 0 {
			floor = res.floor
			h.floor = floor
		}
		interval := h.interval
		if h.a.flow.count() > 0 {
			interval = min(interval, h.a.flow.busy())
		}
		earliest := start.Add(floor)
		next := start.Add(max(interval, floor))
		if res.more || res.outboxMore || res.subPending {
			next = earliest
		}
		// The cloud stopped holding a long poll before wait_s with nothing
		// for this host to run: it is shutting down, or a retry came due
		// and went elsewhere.
		early := res.wait > 0 && h.clock.Since(start) < res.wait && h.a.flow.count() == 0
		if res.busyPoll {
			early = res.wait > 0 && h.clock.Since(start) < res.wait && res.leased == 0
		}
		earlyAgain := early && lastEarly
		lastEarly = early
		if h.pollNext(res) {
			// Handlers run and there is room for more: a long poll goes out
			// at once (at the floor after early answers in a row), and
			// their outcomes go beside it.
			busyPoll = true
			if earlyAgain {
				h.stopReporter() // the sleep takes the wake-ups
				h.sleep(ctx, earliest, earliest, true)
			}
			continue
		}
		if res.draining && h.drainBeside(res) {
			// A backlog waits and the cloud holds polls while handlers
			// run: as soon as half the window is free the next poll goes
			// out, and it only leases, while the outcomes go beside it
			// (the reporter). Outcomes and leases in one heartbeat were
			// one request's work in turn: the acks of a batch, then the
			// lease of the next, while the workers ran dry.
			h.startReporter(ctx)
			h.awaitRoom(ctx, start.Add(max(interval, floor)))
			busyPoll = true
			continue
		}
		h.stopReporter()
		if res.draining {
			// A backlog waits: the next heartbeat carries the outcomes and
			// asks for more as soon as half the window is free, so the
			// workers never run dry while the cloud has work.
			if !res.outboxMore && !res.subPending {
				next = start.Add(max(interval, floor))
			}
			h.awaitRoom(ctx, next)
			continue
		}
		switch {
		case early:
			// Poll again at once: sleeping out the interval would hold back
			// every webhook accepted meanwhile, after a cloud restart for up
			// to the whole interval. Twice in a row, the cloud's floor
			// applies, so a cloud that does not hold polls is not polled in
			// a loop.
			next = h.clock.Now()
			if earlyAgain {
				next = earliest
			}
		case res.busyPoll && h.a.flow.count() == 0:
			// The handlers finished while the poll was out (their outcomes
			// went beside it): idle, the next one long-polls at once.
			next = h.clock.Now()
		case res.wait > 0 && h.clock.Since(start) >= res.wait:
			// The cloud held a long-poll for all of wait_s: poll again now.
			next = earliest
		case res.wait == 0 && res.canWait && h.a.flow.count() == 0:
			// That heartbeat only reported (the subscription, or outcomes of
			// work that ran when it left); now idle, the next one long-polls,
			// at once: a held heartbeat is no load on the cloud's floor.
			next = h.clock.Now()
		case res.wait == 0 && h.a.flow.count() == 0:
			next = earliest
		}
		h.sleep(ctx, next, earliest, true)
	}
	h.stopReporter()
	return nil
}

// pollNext says whether the next heartbeat is a long poll while handlers
// run (pollWhileBusy): the cloud holds such polls, handlers run, the flow
// window has room, and nothing asks for a heartbeat of another kind — a
// backlog to drain, outcomes or a subscription to report at once, an
// answer lost.
func (h *heartbeats) pollNext(res heartbeatResult) bool {
	return res.pollWhileBusy && res.canWait && !res.more && !res.outboxMore && !res.subPending && !h.answerLost &&
		h.a.flow.count() > 0 && h.a.flow.credit(h.clock.Now(), false).free > 0
}

// drainBeside says whether a drain's next heartbeat is a poll while
// handlers run, its outcomes reported beside it: the cloud holds such
// polls, handlers run, and no answer was lost (the next heartbeat says so).
func (h *heartbeats) drainBeside(res heartbeatResult) bool {
	return res.pollWhileBusy && !h.answerLost && h.a.flow.count() > 0
}

// sleep waits until next, or until earliest once signaled (when wakeable).
// It returns early when ctx is done.
func (h *heartbeats) sleep(ctx context.Context, next, earliest time.Time, wakeable bool) {
	var wake <-chan struct{}
	if wakeable {
		wake = h.a.wake
	}
	for {
		d := h.until(next)
		if d <= 0 {
			return
		}
		t := h.clock.NewTimer(d)
		if !h.clock.Now().Before(next) {
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
			if h.a.flow.count() == 0 && !h.a.rec.unrecordable.Load() {
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

// until returns how long until t, a time on the agent's clock computed
// from an earlier reading of it, and never longer than the cadence ever
// waits: a clock that went back meanwhile does not stall the heartbeat
// for as long as it went back. (Go's monotonic clock never goes back; a
// clock with none might.)
func (h *heartbeats) until(t time.Time) time.Duration {
	return min(t.Sub(h.clock.Now()), max(h.interval, h.maxBackoff, h.floor))
}

// awaitRoom waits until half the lease window is free (or until deadline,
// or ctx is done): outcomes signal the loop as they are recorded.
func (h *heartbeats) awaitRoom(ctx context.Context, deadline time.Time) {
	var t clockwork.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for !h.a.flow.roomForMore() {
		if t == nil {
			d := h.until(deadline)
			if d <= 0 {
				return
			}
			t = h.clock.NewTimer(d)
			if !h.clock.Now().Before(deadline) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			return
		case <-h.a.room:
		}
	}
}
