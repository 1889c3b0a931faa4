package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

func TestFailureOutcomeFollowsTheSchedule(t *testing.T) {
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	want := []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
	for attempts := 1; attempts <= 4; attempts++ {
		st, next := FailureOutcome(DefaultRetryPolicy, attempts, 5, true, now)
		require.Equal(t, store.StatusRetrying, st, "after attempt %d", attempts)
		require.Equal(t, now.Add(want[attempts-1]), *next, "after attempt %d", attempts)
	}
	st, next := FailureOutcome(DefaultRetryPolicy, 5, 5, true, now)
	require.Equal(t, store.StatusDLQ, st, "the fifth failure dead-letters")
	require.Nil(t, next)

	st, next = FailureOutcome(DefaultRetryPolicy, 1, 5, false, now)
	require.Equal(t, store.StatusDLQ, st, "not retryable dead-letters at once")
	require.Nil(t, next)

	// A delivery allowed more attempts than the policy lists waits the
	// longest delay; max 0 means the policy's own.
	st, next = FailureOutcome(DefaultRetryPolicy, 6, 8, true, now)
	require.Equal(t, store.StatusRetrying, st)
	require.Equal(t, now.Add(time.Hour), *next)
	st, _ = FailureOutcome(DefaultRetryPolicy, 5, 0, true, now)
	require.Equal(t, store.StatusDLQ, st)
	require.Equal(t, DefaultRetryPolicy, RetryPolicy{}.OrDefault())
}

func TestFailureReasons(t *testing.T) {
	require.Equal(t, "nacked by host: not retryable, dead-lettered", FailureReason(store.TransitionNack, store.StatusDLQ, false))
	require.Equal(t, "lease expired: attempts exhausted, dead-lettered", FailureReason(store.TransitionExpire, store.StatusDLQ, true))
	require.Equal(t, "lease expired", FailureReason(store.TransitionExpire, store.StatusRetrying, true))
}

func TestNacksByID(t *testing.T) {
	ids, by := NacksByID([]Nack{{ID: "a", Error: "1"}, {ID: "b"}, {ID: "a", Error: "2"}})
	require.Equal(t, []string{"a", "b"}, ids)
	require.Equal(t, "2", by["a"].Error)
}

func TestRetrySchedules(t *testing.T) {
	own := []time.Duration{0, 5 * time.Second}
	require.Equal(t, RetryPolicy{Delays: own}, PolicyFor(own, DefaultRetryPolicy))
	fallback := RetryPolicy{Delays: []time.Duration{0, time.Second}}
	require.Equal(t, fallback, PolicyFor(nil, fallback))
	require.Equal(t, DefaultRetryPolicy, PolicyFor(nil, RetryPolicy{}))
	require.Equal(t, store.DefaultMaxAttempts, DefaultRetryPolicy.MaxAttempts(), "the store's default is the policy's")
}

func TestFailDecisions(t *testing.T) {
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	f := store.Failing{ID: "d", HostID: "h", Status: store.StatusDelivered, Attempts: 1, MaxAttempts: 5}

	fl := Fail(store.TransitionNack, f, DefaultRetryPolicy, true, "503", now)
	require.Equal(t, store.Failure{Transition: store.TransitionNack, To: store.StatusRetrying,
		NextRetryAt: ptr(now.Add(30 * time.Second)), LastError: "503", Reason: "nacked by host"}, fl)

	fl = Fail(store.TransitionRelease, f, DefaultRetryPolicy, true, "answer not written", now)
	require.Equal(t, ptr(now), fl.NextRetryAt, "an AtOnce transition is due again now")
	require.Nil(t, fl.DLQAt)

	f.Attempts = 5
	fl = Fail(store.TransitionRelease, f, DefaultRetryPolicy, true, "answer not written", now)
	require.Equal(t, store.StatusDLQ, fl.To, "even at once, out of attempts")
	require.Equal(t, ptr(now), fl.DLQAt)
	require.Nil(t, fl.NextRetryAt)
	require.Equal(t, "answer not written: attempts exhausted, dead-lettered", fl.Reason)

	f.Attempts, f.RetryDelays = 1, []time.Duration{0, 5 * time.Second}
	fl = Fail(store.TransitionNack, f, DefaultRetryPolicy, true, "", now)
	require.Equal(t, ptr(now.Add(5*time.Second)), fl.NextRetryAt, "the delivery's own schedule first")
}

func TestFailConstructors(t *testing.T) {
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	p := NackParams("h", []Nack{{ID: "a", Error: "first"}, {ID: "b", Attempt: 1, Retryable: true}, {ID: "a", Error: "last", Retryable: true}},
		DefaultRetryPolicy, now)
	require.Equal(t, []string{"a", "b"}, p.IDs)
	fl, ok := p.Fail(store.Failing{ID: "a", Status: store.StatusDelivered, Attempts: 2})
	require.True(t, ok)
	require.Equal(t, "last", fl.LastError, "the last nack of an id wins")
	require.Equal(t, store.StatusRetrying, fl.To)
	_, ok = p.Fail(store.Failing{ID: "b", Status: store.StatusDelivered, Attempts: 2})
	require.False(t, ok, "a nack of attempt 1 when the delivery is on attempt 2 is stale")

	e := ExpireLeasesParams(RetryPolicy{}, 7, now)
	require.Equal(t, 7, e.Limit)
	fl, _ = e.Fail(store.Failing{Status: store.StatusDelivering, Attempts: 1})
	require.Equal(t, store.TransitionExpireUnwritten, fl.Transition, "never written: due again at once")
	require.Equal(t, ptr(now), fl.NextRetryAt)
	fl, _ = e.Fail(store.Failing{Status: store.StatusDelivered, Attempts: 1})
	require.Equal(t, store.TransitionExpire, fl.Transition)
	require.Equal(t, ptr(now.Add(30*time.Second)), fl.NextRetryAt, "handed out: on the schedule")

	fl, _ = ReleaseUnheldParams("h", nil, RetryPolicy{}, now).Fail(store.Failing{Status: store.StatusDelivered, Attempts: 1})
	require.Equal(t, store.TransitionAnswerLost, fl.Transition)
	require.Equal(t, ptr(now), fl.NextRetryAt)
}

// TestHandBack: a nack of a webhook not started is due again at once with
// its attempt given back, even on its last attempt; past the ceiling it is
// an ordinary nack; a stale one changes nothing.
func TestHandBack(t *testing.T) {
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	back := func(id string, attempt int) Nack {
		return Nack{ID: id, Error: "host stopping: not started", Retryable: true, Attempt: attempt, NotStarted: true}
	}
	p := NackParams("h", []Nack{back("a", 1), back("last", 5), back("stale", 1), back("ceiling", 0), back("own", 1),
		{ID: "plain", Error: "503", Retryable: true}}, DefaultRetryPolicy, now)

	fl, ok := p.Fail(store.Failing{ID: "a", Status: store.StatusDelivered, Attempts: 1, MaxAttempts: 5})
	require.True(t, ok)
	require.Equal(t, store.Failure{Transition: store.TransitionHandBack, To: store.StatusRetrying, NextRetryAt: ptr(now),
		LastError: "host stopping: not started", Reason: "handed back by the host, not started", MaxAttempts: 6}, fl,
		"due at once, the attempt given back")
	require.True(t, fl.Transition.AtOnce, "its host is woken")

	fl, ok = p.Fail(store.Failing{ID: "last", Status: store.StatusDelivering, Attempts: 5, MaxAttempts: 5})
	require.True(t, ok)
	require.Equal(t, store.StatusRetrying, fl.To, "on its last attempt, still retrying")
	require.Equal(t, ptr(now), fl.NextRetryAt)
	require.Nil(t, fl.DLQAt)
	require.Equal(t, 6, fl.MaxAttempts)

	_, ok = p.Fail(store.Failing{ID: "stale", Status: store.StatusDelivered, Attempts: 2, MaxAttempts: 6})
	require.False(t, ok, "a hand-back of an attempt already counted changes nothing")

	fl, _ = p.Fail(store.Failing{ID: "ceiling", Status: store.StatusDelivered, Attempts: 7, MaxAttempts: HandBackCeiling - 1})
	require.Equal(t, HandBackCeiling, fl.MaxAttempts, "up to the ceiling")
	fl, _ = p.Fail(store.Failing{ID: "ceiling", Status: store.StatusDelivered, Attempts: 7, MaxAttempts: HandBackCeiling})
	require.Equal(t, store.Failure{Transition: store.TransitionNack, To: store.StatusRetrying, NextRetryAt: ptr(now.Add(time.Hour)),
		LastError: "host stopping: not started", Reason: "nacked by host"}, fl, "past the ceiling: an ordinary nack, on the schedule")
	fl, _ = p.Fail(store.Failing{ID: "ceiling", Status: store.StatusDelivered, Attempts: HandBackCeiling, MaxAttempts: HandBackCeiling})
	require.Equal(t, store.StatusDLQ, fl.To, "and out of attempts it is dead-lettered")
	require.Zero(t, fl.MaxAttempts)

	fl, _ = p.Fail(store.Failing{ID: "own", Status: store.StatusDelivered, Attempts: 1, RetryDelays: []time.Duration{0, time.Second, time.Second}})
	require.Equal(t, 4, fl.MaxAttempts, "no max of its own: one per entry of its schedule, plus the one given back")

	fl, _ = p.Fail(store.Failing{ID: "plain", Status: store.StatusDelivered, Attempts: 1, MaxAttempts: 5})
	require.Equal(t, store.TransitionNack, fl.Transition)
	require.Zero(t, fl.MaxAttempts, "an ordinary nack leaves max_attempts")
	require.Equal(t, ptr(now.Add(30*time.Second)), fl.NextRetryAt)

	// A hand-back is an attempt made: a later failure waits as after it.
	fl = Fail(store.TransitionNack, store.Failing{Status: store.StatusDelivered, Attempts: 2, MaxAttempts: 6}, DefaultRetryPolicy, true, "503", now)
	require.Equal(t, ptr(now.Add(2*time.Minute)), fl.NextRetryAt)
}

func ptr[T any](v T) *T { return &v }
