package agent

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
