package agent

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/shared"
)

// stepUntilHeartbeat moves the clock forward by step each time the agent
// waits on it, until the cloud sees a heartbeat: the heartbeat's time on the
// clock then says how long the agent waited, to within step.
func (b *testBundle) stepUntilHeartbeat(t *testing.T, step time.Duration) heartbeatSeen {
	t.Helper()
	for {
		select {
		case hb := <-b.cloud.requests:
			return hb
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := b.clock.BlockUntilContext(ctx, 1)
		cancel()
		select {
		case hb := <-b.cloud.requests:
			return hb
		default:
		}
		require.NoError(t, err, "no heartbeat, and the agent never waited on its clock")
		b.clock.Advance(step)
	}
}

// A long poll the cloud stops holding before wait_s with nothing leased (a
// cloud shutting down answers its waiting heartbeats at once) is followed by
// a new long poll at once, not after the rest of the host's interval: a
// webhook accepted meanwhile would wait for it. Early answers in a row wait
// for the cloud's floor, so a cloud that does not hold polls is not polled
// in a tight loop.
func TestEarlyEmptyAnswerPollsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) {
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			if req.WaitS > 0 && (n == 2 || n == 6) {
				// Held a while of the 25 s asked, then answered empty.
				b.clock.Advance(200 * time.Millisecond)
			}
			return http.StatusOK, shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
		}
	})
	require.NotNil(t, b.next(t).req.Config, "the subscription goes first")
	held := b.next(t)
	require.Equal(t, 25, held.req.WaitS)

	// No clock advance: the next long poll leaves as the early answer lands,
	// sooner than the cloud's floor (1 s) after the last one.
	again := b.next(t)
	require.Equal(t, 25, again.req.WaitS, "idle: a long poll again")
	require.Equal(t, held.at, again.at, "no wait after the early answer")

	// That one was answered early too (at once), and so are the next two:
	// each waits for the floor from when the one before left, no longer.
	for range 2 {
		floored := b.stepUntilHeartbeat(t, 100*time.Millisecond)
		require.Equal(t, 25, floored.req.WaitS)
		require.Equal(t, time.Second, floored.at.Sub(again.at))
		again = floored
	}
	// Held a while (0.2 s; the cloud saw it leave 1 s after the last), and
	// answered early after early ones: the floor from when it left.
	held = b.stepUntilHeartbeat(t, 100*time.Millisecond)
	require.Equal(t, 1200*time.Millisecond, held.at.Sub(again.at))
	floored := b.stepUntilHeartbeat(t, 100*time.Millisecond)
	require.Equal(t, 800*time.Millisecond, floored.at.Sub(held.at))
}

// A heartbeat that fails is retried with exponential backoff from a quarter
// of a second (±50 %), doubling on each failure; a success resets it, so
// the first failure after one is retried quickly again.
func TestHeartbeatErrorsBackOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) {
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			if n <= 4 || n == 6 {
				return http.StatusServiceUnavailable, shared.HeartbeatResponse{}
			}
			return http.StatusOK, shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
		}
	})
	const step = 10 * time.Millisecond
	prev := b.next(t)
	require.Equal(t, http.StatusServiceUnavailable, prev.status)
	for i, want := range []struct{ lo, hi time.Duration }{
		{125 * time.Millisecond, 375 * time.Millisecond},
		{250 * time.Millisecond, 750 * time.Millisecond},
		{500 * time.Millisecond, 1500 * time.Millisecond},
		{time.Second, 3 * time.Second}, // the fifth heartbeat succeeds
	} {
		hb := b.stepUntilHeartbeat(t, step)
		require.Equal(t, prev.n+1, hb.n)
		gap := hb.at.Sub(prev.at)
		require.True(t, gap >= want.lo && gap <= want.hi+step, "retry %d after %s, want %s–%s", i+1, gap, want.lo, want.hi)
		prev = hb
	}
	require.Equal(t, http.StatusOK, prev.status)
	require.NotNil(t, prev.req.Config, "the subscription, not accepted by the failed ones, goes again")

	// Idle after reporting, the next long-polls at once; it fails, and the
	// backoff starts over.
	failed := b.next(t)
	require.Equal(t, http.StatusServiceUnavailable, failed.status)
	require.Equal(t, prev.at, failed.at)
	retry := b.stepUntilHeartbeat(t, step)
	gap := retry.at.Sub(failed.at)
	require.True(t, gap >= 125*time.Millisecond && gap <= 375*time.Millisecond+step, "retry after %s: the backoff was reset by the success", gap)
	require.Equal(t, http.StatusOK, retry.status)
	require.Equal(t, 25, retry.req.WaitS)
}

// With a cloud that holds a long poll while handlers run
// (poll_while_busy), a host keeps one out while its handler runs, and
// reports the outcome beside it in a heartbeat that leases nothing and
// does not wait: the poll stays out, and a webhook answered on it reaches
// its handler without a heartbeat to report the one before. Nothing here
// moves the clock.
func TestPollWhileBusy(t *testing.T) {
	t.Parallel()
	first, second := webhook("github:a:1", "pull_request"), webhook("github:b:1", "push")
	h := newBlocked()
	release := make(chan struct{})
	var secondRan atomic.Bool
	b := setup(t, func(b *testBundle) {
		b.handler.fn = func(ctx context.Context, w shared.Webhook) handler.Outcome {
			if w.DeliveryID == second.DeliveryID {
				secondRan.Store(true)
				return handler.Outcome{OK: true, ResponseStatus: 200}
			}
			return h.run(ctx, w)
		}
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, PollWhileBusy: true}
			switch n {
			case 2:
				resp.Webhooks = []shared.Webhook{first}
			case 3:
				resp.Webhooks = []shared.Webhook{second}
			}
			return http.StatusOK, resp
		}
		b.cloud.hold = func(n int, req shared.HeartbeatRequest) <-chan struct{} {
			if n == 3 {
				return release // held until the test lets it go
			}
			return nil
		}
	})
	require.NotNil(t, b.next(t).req.Config, "the subscription goes first")
	idle := b.next(t)
	require.Equal(t, 25, idle.req.WaitS)
	<-h.started

	poll := b.next(t)
	require.Equal(t, 25, poll.req.WaitS, "a long poll while the handler runs")
	require.Equal(t, 15, *poll.req.MaxWebhooks, "the window less the one running")
	require.Empty(t, poll.req.WebhookAcks)
	require.Empty(t, poll.req.WebhookExtends)

	close(h.release)
	report := b.next(t)
	require.Equal(t, []string{first.DeliveryID}, report.req.WebhookAcks, "reported beside the poll, still held")
	require.Equal(t, 0, *report.req.MaxWebhooks)
	require.Zero(t, report.req.WaitS)
	require.False(t, report.req.AnswerLost)

	close(release) // the poll is answered with the next webhook
	b.eventually(t, "the second ran", secondRan.Load)
	// Its ack goes beside the next poll, or (done before that poll left,
	// the host idle) on an idle long poll; either way at once.
	acked := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{second.DeliveryID}, acked.req.WebhookAcks)
	require.True(t, *acked.req.MaxWebhooks == 0 || acked.req.WaitS == 25, "a report, or an idle long poll")
	require.Equal(t, idle.at, acked.at, "no time passed")
}

// While a poll is held beside a running handler, the handler's lease is
// extended in time by a heartbeat beside the poll, which leases nothing.
func TestPollWhileBusyExtends(t *testing.T) {
	t.Parallel()
	w := webhook("github:slow:1", "pull_request")
	h := newBlocked()
	release := make(chan struct{})
	b := setup(t, func(b *testBundle) {
		b.handler.fn = h.run
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, PollWhileBusy: true}
			if n == 2 {
				resp.Webhooks = []shared.Webhook{w}
			}
			return http.StatusOK, resp
		}
		b.cloud.hold = func(n int, req shared.HeartbeatRequest) <-chan struct{} {
			if req.WaitS > 0 && n > 2 {
				return release // held until the test ends
			}
			return nil
		}
	})
	t.Cleanup(func() { close(h.release); close(release) })
	b.next(t)
	b.next(t)
	<-h.started
	poll := b.next(t)
	require.Equal(t, 25, poll.req.WaitS)
	require.Empty(t, poll.req.WebhookExtends)

	// The reporter starts beside the poll and arms its timer on its own
	// time. The agent has one other waiter on the clock in this state, so
	// waiting for one let the advance come first now and then (under
	// load), and the reporter's timer, armed after it, never fired.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 2), "the reporter never waited on its clock")
	b.advance(t, 30*time.Second)
	ext := b.next(t)
	require.Equal(t, []string{w.DeliveryID}, ext.req.WebhookExtends)
	require.Equal(t, 0, *ext.req.MaxWebhooks, "beside the poll, still held")
	require.Zero(t, ext.req.WaitS)
	require.Equal(t, poll.at.Add(30*time.Second), ext.at)
}
