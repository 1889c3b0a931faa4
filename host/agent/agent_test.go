package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

func TestHandledOnceAndAckedOnNextHeartbeat(t *testing.T) {
	t.Parallel()
	w := webhook("github:a:1", "pull_request")
	b := setup(t, func(b *testBundle) { b.cloud.answer = serve(w) })

	hb := b.next(t)
	require.Equal(t, 1, hb.n)
	require.Equal(t, "Bearer tok-1", hb.authorization)
	require.Equal(t, Version, hb.req.AgentVersion)
	require.True(t, hb.req.RawBodyOnly, "handlers read the raw body only")
	require.Equal(t, 16, *hb.req.MaxWebhooks, "2 workers × 8")
	require.Equal(t, []string{"pull_request", "push"}, hb.req.Config.Webhooks["github"].Events)
	require.Empty(t, hb.req.WebhookAcks)

	b.eventually(t, "ledger records success", func() bool { return b.result(t, w.DeliveryID) == ledger.ResultSuccess })
	// The ack is due: the agent comes back after the cloud's 1 s floor, not
	// after its own 30 s interval.
	b.advance(t, time.Second)
	hb = b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{w.DeliveryID}, hb.req.WebhookAcks)
	require.Empty(t, hb.req.WebhookNacks)
	// With the ack, what the ledger recorded of the run.
	require.Len(t, hb.req.WebhookResults, 1)
	res := hb.req.WebhookResults[0]
	require.Equal(t, shared.WebhookResult{DeliveryID: w.DeliveryID, Attempt: 1, Result: "success", Handler: "fake",
		ResponseStatus: res.ResponseStatus, DurationMS: res.DurationMS}, res)
	require.Equal(t, 200, *res.ResponseStatus)
	b.eventually(t, "outbox emptied", func() bool { return b.outbox(t) == 0 })
	require.EqualValues(t, 1, b.handler.calls.Load())

	e, err := b.ledger.DeliveryGet(context.Background(), w.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, "fake", e.Handler)
	require.Equal(t, "corr-github:a:1", e.CorrelationID)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, 1, e.CloudAttempt)
	require.Equal(t, "pull_request.opened acme/app #7", e.Summary)
	require.Equal(t, map[string]string{"github.repo": "acme/app", "github.number": "7", "github.action": "opened"}, e.Fields)
	require.Equal(t, 200, *e.ResponseStatus)
	require.Equal(t, "done", e.Output)
	require.False(t, b.agent.LastHeartbeat().IsZero())
}

func TestAlreadySucceededIsAckedWithoutRunning(t *testing.T) {
	t.Parallel()
	w := webhook("github:a:1", "pull_request")
	b := setup(t, func(b *testBundle) {
		// A previous run handled it and sent the ack, which the cloud lost.
		_, err := b.ledger.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: ledger.Entry{
			DeliveryID: w.DeliveryID, Source: "github", Result: ledger.ResultSuccess, ProcessedAt: b.clock.Now(),
		}})
		require.NoError(t, err)
		ob, err := b.ledger.OutboxList(context.Background(), 10)
		require.NoError(t, err)
		require.NoError(t, b.ledger.OutboxDelete(context.Background(), []int64{ob[0].Seq}))
		b.cloud.answer = serve(w)
	})

	b.next(t)
	// Queued again, and sent at once: nothing else runs.
	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{w.DeliveryID}, hb.req.WebhookAcks)
	require.Equal(t, "success", hb.req.WebhookResults[0].Result, "the ack again carries the earlier run's result")
	require.EqualValues(t, 0, b.handler.calls.Load(), "handler must not run again")
}

func TestOutboxSurvivesRestartAndIsDeletedOnlyAfterSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) {
		// Crash after the ledger write, before the ack went out.
		_, err := b.ledger.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: ledger.Entry{
			DeliveryID: "github:old:1", Source: "github", Result: ledger.ResultSuccess, ProcessedAt: b.clock.Now(),
		}})
		require.NoError(t, err)
		b.cloud.answer = failFirst(http.StatusServiceUnavailable)
	})

	hb := b.next(t)
	require.Equal(t, http.StatusServiceUnavailable, hb.status)
	require.Equal(t, []string{"github:old:1"}, hb.req.WebhookAcks)
	// The agent is backing off; the failed heartbeat deleted nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	require.Equal(t, 1, b.outbox(t))
	require.True(t, b.agent.LastHeartbeat().IsZero())

	b.clock.Advance(30 * time.Second) // the backoff cap
	hb = b.next(t)
	require.Equal(t, http.StatusOK, hb.status)
	require.Equal(t, []string{"github:old:1"}, hb.req.WebhookAcks)
	b.eventually(t, "outbox emptied", func() bool { return b.outbox(t) == 0 })
	require.EqualValues(t, 0, b.handler.calls.Load())
}

func TestNacks(t *testing.T) {
	t.Parallel()
	retry := webhook("github:retry:1", "pull_request")
	fatal := webhook("github:fatal:1", "push")
	b := setup(t, func(b *testBundle) {
		b.handler.fn = func(_ context.Context, w shared.Webhook) handler.Outcome {
			if w.DeliveryID == retry.DeliveryID {
				return handler.Outcome{Retryable: true, Error: "HTTP 503: busy", ResponseStatus: 503}
			}
			return handler.Outcome{Retryable: false, Error: "HTTP 404", ResponseStatus: 404}
		}
		b.cloud.answer = serve(retry, fatal)
	})

	b.next(t)
	b.eventually(t, "both recorded", func() bool {
		return b.result(t, retry.DeliveryID) == ledger.ResultError && b.result(t, fatal.DeliveryID) == ledger.ResultError
	})
	b.advance(t, time.Second)
	var nacks []shared.Nack
	for len(nacks) < 2 {
		nacks = append(nacks, b.next(t).req.WebhookNacks...)
		if len(nacks) < 2 {
			b.advance(t, time.Second)
		}
	}
	require.ElementsMatch(t, []shared.Nack{
		{DeliveryID: retry.DeliveryID, Error: "HTTP 503: busy", Retryable: true, Attempt: retry.Attempt},
		{DeliveryID: fatal.DeliveryID, Error: "HTTP 404", Retryable: false, Attempt: fatal.Attempt},
	}, nacks, "each nack names the attempt it reports")
	e, err := b.ledger.DeliveryGet(context.Background(), retry.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, "HTTP 503: busy", e.Error)
}

func TestSkipsUnsubscribedEventsAndDisabledSources(t *testing.T) {
	t.Parallel()
	issue := webhook("github:issue:1", "issues")
	slack := webhook("slack:e:1", "message")
	slack.Source = "slack"
	b := setup(t, func(b *testBundle) { b.cloud.answer = serve(issue, slack) })

	b.next(t)
	b.eventually(t, "both skipped", func() bool {
		return b.result(t, issue.DeliveryID) == ledger.ResultSkipped && b.result(t, slack.DeliveryID) == ledger.ResultSkipped
	})
	b.advance(t, time.Second)
	var acks []string
	for len(acks) < 2 {
		acks = append(acks, b.next(t).req.WebhookAcks...)
		if len(acks) < 2 {
			b.advance(t, time.Second)
		}
	}
	require.ElementsMatch(t, []string{issue.DeliveryID, slack.DeliveryID}, acks)
	require.EqualValues(t, 0, b.handler.calls.Load())
}

// TestEventFilterMatchesTypeAndAction: a route's events use the same rule as
// the cloud's filter, so "pull_request.opened" runs the handler for an opened
// pull request and skips a closed one.
func TestEventFilterMatchesTypeAndAction(t *testing.T) {
	t.Parallel()
	opened := webhook("github:pr:1", "pull_request")
	closed := webhook("github:pr:2", "pull_request")
	closed.EventAction = "closed"
	b := setup(t, func(b *testBundle) {
		b.cloud.answer = serve(opened, closed)
		b.sources = map[string]Source{"github": {Enabled: true, Events: []string{"pull_request.opened"}, Routes: []Route{{Handler: b.handler}}}}
	})
	b.next(t)
	b.eventually(t, "both recorded", func() bool {
		return b.result(t, opened.DeliveryID) == ledger.ResultSuccess && b.result(t, closed.DeliveryID) == ledger.ResultSkipped
	})
	require.EqualValues(t, 1, b.handler.calls.Load())
}

func TestInFlightIsExtendedAndNotStartedTwice(t *testing.T) {
	t.Parallel()
	w := webhook("github:slow:1", "pull_request")
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	b := setup(t, func(b *testBundle) {
		b.handler.fn = func(ctx context.Context, _ shared.Webhook) handler.Outcome {
			started <- struct{}{}
			<-release
			return handler.Outcome{OK: true}
		}
		// The cloud hands the same delivery out twice (say its lease ran out).
		b.cloud.answer = func(n int, _ shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
			if n <= 2 {
				resp.Webhooks = []shared.Webhook{w}
			}
			return http.StatusOK, resp
		}
	})

	b.next(t)
	<-started
	require.Equal(t, 1, b.agent.InFlight())
	b.advance(t, 30*time.Second)
	hb := b.next(t)
	require.Equal(t, []string{w.DeliveryID}, hb.req.WebhookExtends)
	require.Equal(t, 15, *hb.req.MaxWebhooks)
	// Once the agent sleeps again it has dealt with the second copy.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	close(release)
	b.eventually(t, "recorded", func() bool { return b.result(t, w.DeliveryID) == ledger.ResultSuccess })
	b.advance(t, time.Second)
	hb = b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{w.DeliveryID}, hb.req.WebhookAcks)
	require.Empty(t, hb.req.WebhookExtends)
	require.EqualValues(t, 1, b.handler.calls.Load())
	require.Empty(t, started)
}

func TestStopLetsHandlersFinishAndFlushes(t *testing.T) {
	t.Parallel()
	w := webhook("github:a:1", "pull_request")
	h := newBlocked()
	b := setup(t, func(b *testBundle) {
		b.handler.fn = h.run
		b.cloud.answer = serve(w)
	})
	b.next(t)
	<-h.started
	b.cancel()
	// Run waits for the handler: the grace timer is armed and Run has not
	// returned.
	b.eventually(t, "stopping", b.agent.Stopping)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	require.Empty(t, b.done)
	close(h.release)

	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{w.DeliveryID}, hb.req.WebhookAcks)
	require.Equal(t, 0, *hb.req.MaxWebhooks, "stopping: no new work")
	b.stopped(t)
	require.Equal(t, 0, b.outbox(t))
}

func TestStopCancelsHandlersAfterGrace(t *testing.T) {
	t.Parallel()
	w := webhook("github:a:1", "pull_request")
	started, canceled := make(chan struct{}), make(chan struct{})
	b := setup(t, func(b *testBundle) {
		b.handler.fn = func(ctx context.Context, _ shared.Webhook) handler.Outcome {
			close(started)
			<-ctx.Done()
			close(canceled)
			return handler.Outcome{Retryable: true, Error: "canceled: host shutting down"}
		}
		b.cloud.answer = serve(w)
	})
	b.next(t)
	<-started
	b.cancel()
	b.eventually(t, "stopping", b.agent.Stopping)
	// The grace timer starts once the transport has stopped, which the
	// test cannot see (other timers wait on the clock too): the clock moves
	// on a second at a time until the grace period (10 s) has passed for it.
	b.eventually(t, "handler canceled once the grace period is over", func() bool {
		b.clock.Advance(time.Second)
		select {
		case <-canceled:
			return true
		default:
			return false
		}
	})

	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookNacks) > 0 })
	require.Equal(t, []shared.Nack{{DeliveryID: w.DeliveryID, Error: "canceled: host shutting down", Retryable: true, Attempt: w.Attempt}}, hb.req.WebhookNacks)
	b.stopped(t)
}

// An idle host long-polls (wait_s), and polls again at once when the cloud
// held it for all of it; with anything to report or running, it does not.
func TestIdleHeartbeatLongPolls(t *testing.T) {
	h := newBlocked()
	released := false
	t.Cleanup(func() {
		if !released {
			close(h.release)
		}
	})
	b := setup(t, func(b *testBundle) {
		b.handler.fn = h.run
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
			switch {
			case req.WaitS > 0 && n == 2:
				b.clock.Advance(time.Duration(req.WaitS) * time.Second) // held for all of it
			case req.WaitS > 0 && n == 3:
				resp.Webhooks = []shared.Webhook{webhook("github:d-1:1", "push")} // work arrived
			}
			return http.StatusOK, resp
		}
	})
	first := b.next(t)
	require.NotNil(t, first.req.Config, "the subscription goes first")
	require.Zero(t, first.req.WaitS, "a heartbeat with something to report does not wait")
	// Idle after reporting, it long-polls at once, without waiting for the
	// cloud's floor: webhooks that arrive just after a start are not held.
	second := b.next(t)
	require.Equal(t, 25, second.req.WaitS, "idle: wait_s is the interval, at most 25 s")
	third := b.next(t) // no clock advance needed: the cloud held the poll for all of wait_s
	require.Equal(t, 25, third.req.WaitS)

	// The handler itself must be running (not only leased): the ledger
	// lookup before it has a deadline on the same clock.
	<-h.started
	b.advance(t, 30*time.Second)
	busy := b.next(t)
	require.Equal(t, []string{"github:d-1:1"}, busy.req.WebhookExtends)
	require.Zero(t, busy.req.WaitS, "a host with work in flight does not long-poll")
	close(h.release)
	released = true
	// Done and idle again: the ack goes out at once, without the clock
	// moving, in a heartbeat that long-polls for the next webhook.
	acked := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{"github:d-1:1"}, acked.req.WebhookAcks)
	require.Equal(t, 25, acked.req.WaitS, "the acks ride on a long poll")
}

// A handler that runs longer than the ledger's own deadline (agent tasks take
// minutes) still has its outcome recorded and acked: it is not left to be
// delivered, and run, again.
func TestLongHandlerOutcomeIsRecorded(t *testing.T) {
	h := newBlocked()
	b := setup(t, func(b *testBundle) {
		b.handler.fn = h.run
		b.cloud.answer = serve(webhook("github:long:1", "push"))
	})
	<-h.started
	b.clock.Advance(5 * time.Minute) // the handler runs far past the ledger's 30 s deadline
	close(h.release)
	b.eventually(t, "outcome recorded", func() bool { return b.result(t, "github:long:1") == ledger.ResultSuccess })
	hb := b.nextWhere(t, func(hb heartbeatSeen) bool {
		b.clock.Advance(time.Second)
		return len(hb.req.WebhookAcks) > 0
	})
	require.Equal(t, []string{"github:long:1"}, hb.req.WebhookAcks)
	require.EqualValues(t, 1, b.handler.calls.Load())
}

// A heartbeat that fails may have leased webhooks that never arrived: the
// next one says so, listing what the host holds, and only that one. A
// binary answer that breaks its layout is such a failure: what it leased
// is not run.
func TestLostAnswerIsReported(t *testing.T) {
	t.Parallel()
	broken := func(t *testing.T) []byte {
		// A lease the host must not take: its body is in the JSON.
		js := `{"status":"ok","heartbeat_interval_s":1,"more":false,"webhooks":[{"delivery_id":"github:b:1","source":"github",` +
			`"event_type":"push","headers":{},"raw_body":"eHk=","raw_body_len":2,"attempt":1}],"now":"2026-02-16T10:00:00Z"}`
		m := binary.BigEndian.AppendUint32(nil, uint32(len(js)))
		m = binary.BigEndian.AppendUint32(m, 2)
		return append(append(m, js...), "xy"...)
	}
	for _, tc := range []struct {
		name   string
		status int
		raw    bool
	}{
		{"bad gateway", http.StatusBadGateway, false},
		{"broken binary answer", http.StatusOK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := webhook("github:a:1", "pull_request")
			h := newBlocked()
			b := setup(t, func(b *testBundle) {
				b.handler.fn = h.run
				b.cloud.answer = func(n int, _ shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
					resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
					switch n {
					case 1:
						resp.Webhooks = []shared.Webhook{w}
					case 2:
						return tc.status, shared.HeartbeatResponse{} // the answer is lost
					}
					return http.StatusOK, resp
				}
				if tc.raw {
					b.cloud.raw = func(n int) []byte {
						if n == 2 {
							return broken(t)
						}
						return nil
					}
				}
			})
			first := b.next(t)
			require.False(t, first.req.AnswerLost)
			<-h.started

			b.advance(t, 30*time.Second) // the interval, with the handler still running
			lost := b.next(t)
			require.Equal(t, tc.status, lost.status)
			require.False(t, lost.req.AnswerLost)
			b.advance(t, 30*time.Second) // past the backoff
			report := b.next(t)
			require.True(t, report.req.AnswerLost)
			require.Equal(t, []string{w.DeliveryID}, report.req.WebhooksHeld, "what it holds: the running one")

			close(h.release)
			acked := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
			require.False(t, acked.req.AnswerLost, "said once")
			require.Empty(t, acked.req.WebhooksHeld)
			require.EqualValues(t, 1, b.handler.calls.Load(), "nothing of the broken answer ran")
			b.cloud.mu.Lock()
			defer b.cloud.mu.Unlock()
			require.Positive(t, b.cloud.binaryAnswers, "the answers were binary")
		})
	}
}

// TestStopReadsTheHeldPollsAnswer: a host stopped while the cloud holds its
// long poll does not hang up on it (what its answer leased would be lost,
// at the cost of an attempt no handler used): it says it is stopping,
// reads the answer, and hands back what the answer carries, unstarted. A
// poll not answered within stopWait is given up and reported as lost.
func TestStopReadsTheHeldPollsAnswer(t *testing.T) {
	t.Parallel()
	for _, answers := range []bool{true, false} {
		t.Run(fmt.Sprintf("answered=%v", answers), func(t *testing.T) {
			t.Parallel()
			w := webhook("github:a:1", "pull_request")
			held := make(chan struct{})
			var release sync.Once
			var polls atomic.Int32
			b := setup(t, func(b *testBundle) {
				b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
					resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
					if req.WaitS > 0 && polls.Add(1) == 1 {
						resp.Webhooks = []shared.Webhook{w}
					}
					return http.StatusOK, resp
				}
				b.cloud.hold = func(n int, req shared.HeartbeatRequest) <-chan struct{} {
					if req.WaitS > 0 {
						return held
					}
					return nil
				}
			})
			t.Cleanup(func() { release.Do(func() { close(held) }) }) // before the fake cloud closes
			b.nextWhere(t, func(hb heartbeatSeen) bool { return hb.req.WaitS > 0 })
			b.cancel()
			stop := b.nextWhere(t, func(hb heartbeatSeen) bool { return hb.req.Stopping })
			require.Equal(t, 0, *stop.req.MaxWebhooks)
			require.Zero(t, stop.req.WaitS)
			require.Empty(t, stop.req.WebhookAcks)
			b.eventually(t, "stopping", b.agent.Stopping)
			if answers {
				release.Do(func() { close(held) })
			} else {
				b.advance(t, stopWait) // the cloud never answers: given up
			}
			last := b.nextWhere(t, func(hb heartbeatSeen) bool {
				return len(hb.req.WebhookNacks) > 0 || hb.req.AnswerLost
			})
			if answers {
				require.False(t, last.req.AnswerLost, "the answer was read")
				require.Equal(t, []shared.Nack{{DeliveryID: w.DeliveryID, Error: "host stopping: not started", Retryable: true,
					Attempt: w.Attempt, NotStarted: true}}, last.req.WebhookNacks, "handed back")
			} else {
				require.True(t, last.req.AnswerLost)
				require.Empty(t, last.req.WebhooksHeld)
			}
			b.stopped(t)
			require.Zero(t, b.handler.calls.Load(), "no handler started")
		})
	}
}
