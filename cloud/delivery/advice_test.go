package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

var adviceNow = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := adviceNow.Add(d); return &t }

// trailEndingIn is a trail whose last failure is failure ("" for none).
func trailEndingIn(failure string) []*store.DeliveryEvent {
	evs := []*store.DeliveryEvent{{To: store.StatusQueued, Reason: "received"}, {From: store.StatusQueued, To: store.StatusDelivering}}
	if failure != "" {
		evs = append(evs, &store.DeliveryEvent{From: store.StatusDelivering, To: store.StatusRetrying, Reason: failure})
	}
	return evs
}

// TestAdvise: the next action follows the host ledger's result before the
// cloud's status: a handler recorded as done is never retry-safe.
func TestAdvise(t *testing.T) {
	success := &store.DeliveryResult{Result: "success", Attempt: 1, ReportedAt: adviceNow}
	failed := &store.DeliveryResult{Result: "error", Attempt: 1, Error: "HTTP 500", ReportedAt: adviceNow}
	skipped := &store.DeliveryResult{Result: "skipped", Attempt: 1, Error: `this host's configuration has no source "github"`, ReportedAt: adviceNow}
	nacked, expired := "nacked by host", "lease expired: attempts exhausted, dead-lettered"
	for name, c := range map[string]struct {
		d         store.Delivery
		r         *store.DeliveryResult
		failure   string
		action    string
		retrySafe bool
		want      string
	}{
		"acked":                   {store.Delivery{Status: store.StatusAcked, AckedAt: at(-time.Minute)}, success, "", "none", false, "acked 1m0s ago"},
		"acked, skipped by host":  {store.Delivery{Status: store.StatusAcked, ID: "github:d:1", AckedAt: at(-time.Minute)}, skipped, "", "replay", true, "no handler ran. Its body is kept until retention prunes it: fix the host's configuration, then `cloud ctl deliveries replay github:d:1`"},
		"retrying, done on host":  {store.Delivery{Status: store.StatusRetrying, NextRetryAt: at(time.Minute)}, success, nacked, "wait", false, "the side effect is done"},
		"retrying, handler error": {store.Delivery{Status: store.StatusRetrying, NextRetryAt: at(41 * time.Second), LastError: "HTTP 500", Attempts: 1, MaxAttempts: 5}, failed, nacked, "wait", true, "side effect not committed. Next attempt in 41s (attempt 2 of 5)"},
		"retrying, nacked":        {store.Delivery{Status: store.StatusRetrying, NextRetryAt: at(time.Minute)}, nil, nacked, "wait", true, "the cloud's record: nacked by host"},
		"retrying, answer lost":   {store.Delivery{Status: store.StatusRetrying, NextRetryAt: at(time.Minute)}, nil, "the host lost the answer carrying it", "wait", true, "it did not reach the host's handler (the host lost the answer carrying it)"},
		"retrying, lease expired": {store.Delivery{Status: store.StatusRetrying, HostID: "h_1", NextRetryAt: at(time.Minute)}, nil, "lease expired", "wait", false, "whether the handler ran is unknown"},
		"dlq, handler error":      {store.Delivery{Status: store.StatusDLQ, Attempts: 5, LastError: "HTTP 500"}, failed, nacked, "retry", true, "dead-lettered after 5 attempts (HTTP 500)"},
		"dlq, done on host":       {store.Delivery{Status: store.StatusDLQ, HostID: "h_1"}, success, expired, "ack", false, "run `host reconcile --fix` on host h_1"},
		"dlq, lease expired":      {store.Delivery{Status: store.StatusDLQ, HostID: "h_1"}, nil, expired, "investigate", false, "Run `host reconcile` on the host"},
		"retrying, socket closed": {store.Delivery{Status: store.StatusRetrying, HostID: "h_1", NextRetryAt: at(time.Minute)}, nil, "the socket carrying it closed", "wait", false, "the socket carrying it closed while host h_1 held it"},
		"dlq, socket closed":      {store.Delivery{Status: store.StatusDLQ, HostID: "h_1"}, nil, "the socket carrying it closed: attempts exhausted, dead-lettered", "investigate", false, "whether the handler ran is unknown"},
		"lease expired":           {store.Delivery{Status: store.StatusDelivered, LeaseExpiresAt: at(-41 * time.Second)}, nil, "", "wait", false, "the lease expired 41s ago"},
		"lease expired, unsent":   {store.Delivery{Status: store.StatusDelivering, LeaseExpiresAt: at(-41 * time.Second)}, nil, "", "wait", true, "the lease expired 41s ago"},
		"leased":                  {store.Delivery{Status: store.StatusDelivering, LeaseExpiresAt: at(time.Minute)}, nil, "", "wait", false, "may be running now"},
		"queued":                  {store.Delivery{Status: store.StatusQueued}, nil, "", "wait", true, "nothing ran since it was queued"},
		"queued, done on host":    {store.Delivery{Status: store.StatusQueued}, success, "", "wait", false, "the side effect is done"},
	} {
		got := Advise(&c.d, trailEndingIn(c.failure), c.r, adviceNow)
		require.Equal(t, c.action, got.Action, name)
		require.Equal(t, c.retrySafe, got.RetrySafe, name)
		require.Contains(t, got.Why, c.want, name)
	}
}

func TestLastFailure(t *testing.T) {
	require.Equal(t, "lease expired", LastFailure([]*store.DeliveryEvent{{To: "queued"}, {From: "queued", To: "delivering"}, {From: "delivering", To: "retrying", Reason: "lease expired"}, {From: "retrying", To: "delivering"}}))
	require.Empty(t, LastFailure([]*store.DeliveryEvent{{To: "queued"}, {To: "dlq", Reason: "nacked by host"}, {From: "dlq", To: "queued", Reason: "retried by an operator"}}))
}

// A delivery's trail names the replays made of it.
func TestReplaysFromTheTrail(t *testing.T) {
	require.Equal(t, []Ref{{"github:d~replay-5:5", "h_1"}, {"github:d~replay-9:9", "h_2"}}, Replays([]*store.DeliveryEvent{
		{To: "queued", Reason: "received"},
		{From: "acked", To: "acked", Reason: ReplayNote("github:d~replay-5:5", "h_1")},
		{From: "queued", To: "delivering", Reason: "replayed as a name no note has"},
		{From: "acked", To: "acked", Reason: ReplayNote("github:d~replay-9:9", "h_2")},
	}))
	of, ok := ReplayOf([]*store.DeliveryEvent{{To: "queued", Reason: "received (" + ReplayReceiveNote("github:d:1", "h_1") + ")"}})
	require.True(t, ok)
	require.Equal(t, Ref{"github:d:1", "h_1"}, of)
	_, ok = ReplayOf([]*store.DeliveryEvent{{To: "queued", Reason: "received"}})
	require.False(t, ok)
}
