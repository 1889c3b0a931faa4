package agent

import (
	"context"
	"slices"
	"time"

	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// Transport carries webhooks from the cloud to the host and the host's
// outcomes back: today the heartbeat, long-polled at a cadence of its own
// (heartbeats). A transport serves the agent's side, the same for any of
// them:
//
//   - leased webhooks go to Agent.dispatch, which takes them into flight,
//     acks again those the ledger records as done and queues the rest on
//     the worker pool;
//   - flow control (Agent.flow) says how many more the host can take and
//     which leases are due for an extend, and sizes the lease window after
//     each lease (growing it when the pool ran dry meanwhile: pool.markDry,
//     pool.ranDry);
//   - the recorder (Agent.rec) says whether the ledger can record (no new
//     work while it cannot), lists the acks and nacks waiting in the
//     outbox, and deletes those the cloud has;
//   - Agent.tokens hands out the host's token, Agent.subscription is the
//     configuration to send when the cloud does not have it yet,
//     Agent.contacted notes each exchange for the health report, and
//     Agent.wake is signaled when an outcome is recorded or the
//     configuration changed.
//
// The webhooks in flight, the pool and the ledger are the same whatever
// carries them: a transport keeps only its own state (what the cloud last
// accepted, an answer it lost, its cadence).
type Transport interface {
	// Run brings webhooks in and takes outcomes out until ctx is done,
	// then returns nil at once: what its last exchange started (deleting
	// from the outbox what the cloud has) may still run, and Flush waits
	// for it. It returns an error wrapping ErrRevoked, once nothing it
	// started runs, when the cloud refuses the host's credential; other
	// failures it retries.
	Run(ctx context.Context) error
	// Flush reports the outcomes waiting in the outbox, if any, once and
	// taking no new work, and returns how many it reported (0: none
	// waited, or the outbox could not be read). It is the last exchange of
	// a stopping host, called once after Run returned nil, and returns
	// once nothing the transport started runs.
	Flush(ctx context.Context) (int, error)
}

// dispatch takes a leased batch: webhooks already in flight are not started
// twice; the others are looked up in the ledger in one query, those already
// done are acked again, and the rest wait on their source's lane.
func (a *Agent) dispatch(ws []shared.Webhook) {
	if steptime.Enabled() {
		now := time.Now()
		for i := range ws {
			steptime.Stamp(ws[i].Headers, "decoded", now)
		}
	}
	fresh := a.flow.admit(ws, a.clock.Now())
	if len(fresh) == 0 {
		return
	}
	a.pool.expect(len(fresh))
	ids := make([]string, len(fresh))
	for i, w := range fresh {
		ids[i] = w.DeliveryID
	}
	done, err := a.rec.done(ids)
	if err != nil {
		// Without the ledger we cannot tell whether they already ran.
		a.log.Error("ledger lookup failed; leaving the webhooks to be delivered again", "count", len(fresh), "err", err)
		a.flow.release(ids...)
		a.pool.expect(-len(fresh))
		return
	}
	if steptime.Enabled() {
		now := time.Now()
		for _, w := range fresh {
			steptime.Stamp(w.Headers, "looked_up", now)
		}
	}
	n := len(fresh)
	run := fresh[:0] // filtered in place
	for _, w := range fresh {
		if r, ok := done[w.DeliveryID]; ok {
			a.wg.Add(1)
			go a.ackAgain(*w, r)
			continue
		}
		run = append(run, w)
	}
	a.pool.enqueue(run, n-len(run))
}

// ackAgain acks again a webhook the ledger records as done.
func (a *Agent) ackAgain(w shared.Webhook, prev ledger.Result) {
	defer a.wg.Done()
	defer a.finish(w.DeliveryID)
	a.rec.ackAgain(&w, prev)
}

// settle records w's outcome, off the worker that ran it, and takes it out
// of flight.
func (a *Agent) settle(w *shared.Webhook, o outcome) {
	a.rec.record(w, o)
	a.finish(w.DeliveryID)
}

// finish takes a webhook out of flight and wakes the transport: an outcome
// may wait in the outbox, and there is room for more.
func (a *Agent) finish(deliveryID string) {
	a.flow.release(deliveryID)
	a.signal()
}

func (a *Agent) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
	select {
	case a.room <- struct{}{}:
	default:
	}
}

// subscription returns the subscription to report, as JSON (nil: none).
func (a *Agent) subscription() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sub
}

// pendingSub reports whether the subscription differs from sent, the one
// the cloud last accepted.
func (a *Agent) pendingSub(sent []byte) bool {
	sub := a.subscription()
	return sub != nil && !slices.Equal(sub, sent)
}

// contacted notes the outcome of an exchange with the cloud at now.
func (a *Agent) contacted(now time.Time, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.lastError = err.Error()
		return
	}
	a.lastHeartbeat, a.lastError = now, ""
}
