package ctl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

var now = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := now.Add(d); return &t }

// TestAdvise: the next action follows the host ledger's result before the
// cloud's status: a handler recorded as done is never retry-safe.
func TestAdvise(t *testing.T) {
	success := &shared.HostResult{Result: "success", Attempt: 1, ReportedAt: now}
	failed := &shared.HostResult{Result: "error", Attempt: 1, Error: "HTTP 500", ReportedAt: now}
	nacked, expired := "nacked by host", "lease expired: attempts exhausted, dead-lettered"
	for name, c := range map[string]struct {
		d         delivery
		r         *shared.HostResult
		failure   string
		action    string
		retrySafe bool
		want      string
	}{
		"acked":                   {delivery{Status: "acked", AckedAt: at(-time.Minute)}, success, "", "none", false, "acked 1m0s ago"},
		"retrying, done on host":  {delivery{Status: "retrying", NextRetryAt: at(time.Minute)}, success, nacked, "wait", false, "the side effect is done"},
		"retrying, handler error": {delivery{Status: "retrying", NextRetryAt: at(41 * time.Second), LastError: "HTTP 500", Attempts: 1, MaxAttempts: 5}, failed, nacked, "wait", true, "side effect not committed. Next attempt in 41s (attempt 2 of 5)"},
		"retrying, nacked":        {delivery{Status: "retrying", NextRetryAt: at(time.Minute)}, nil, nacked, "wait", true, "the cloud's record: nacked by host"},
		"retrying, answer lost":   {delivery{Status: "retrying", NextRetryAt: at(time.Minute)}, nil, "the host lost the answer carrying it", "wait", true, "it did not reach the host's handler (the host lost the answer carrying it)"},
		"retrying, lease expired": {delivery{Status: "retrying", HostID: "h_1", NextRetryAt: at(time.Minute)}, nil, "lease expired", "wait", false, "whether the handler ran is unknown"},
		"dlq, handler error":      {delivery{Status: "dlq", Attempts: 5, LastError: "HTTP 500"}, failed, nacked, "retry", true, "dead-lettered after 5 attempts (HTTP 500)"},
		"dlq, done on host":       {delivery{Status: "dlq", HostID: "h_1"}, success, expired, "ack", false, "run `host reconcile --fix` on host h_1"},
		"dlq, lease expired":      {delivery{Status: "dlq", HostID: "h_1"}, nil, expired, "investigate", false, "Run `host reconcile` on the host"},
		"retrying, socket closed": {delivery{Status: "retrying", HostID: "h_1", NextRetryAt: at(time.Minute)}, nil, "the socket carrying it closed", "wait", false, "the socket carrying it closed while host h_1 held it"},
		"dlq, socket closed":      {delivery{Status: "dlq", HostID: "h_1"}, nil, "the socket carrying it closed: attempts exhausted, dead-lettered", "investigate", false, "whether the handler ran is unknown"},
		"lease expired":           {delivery{Status: "delivered", LeaseExpires: at(-41 * time.Second)}, nil, "", "wait", false, "the lease expired 41s ago"},
		"lease expired, unsent":   {delivery{Status: "delivering", LeaseExpires: at(-41 * time.Second)}, nil, "", "wait", true, "the lease expired 41s ago"},
		"leased":                  {delivery{Status: "delivering", LeaseExpires: at(time.Minute)}, nil, "", "wait", false, "may be running now"},
		"queued":                  {delivery{Status: "queued"}, nil, "", "wait", true, "nothing ran since it was queued"},
		"queued, done on host":    {delivery{Status: "queued"}, success, "", "wait", false, "the side effect is done"},
	} {
		got := advise(c.d, c.r, c.failure, now)
		require.Equal(t, c.action, got.Action, name)
		require.Equal(t, c.retrySafe, got.RetrySafe, name)
		require.Contains(t, got.Why, c.want, name)
	}
}

func TestLastFailure(t *testing.T) {
	require.Equal(t, "lease expired", lastFailure([]event{{To: "queued"}, {From: "queued", To: "delivering"}, {From: "delivering", To: "retrying", Reason: "lease expired"}, {From: "retrying", To: "delivering"}}))
	require.Empty(t, lastFailure([]event{{To: "queued"}, {To: "dlq", Reason: "nacked by host"}, {From: "dlq", To: "queued", Reason: "retried by an operator"}}))
}

func TestLeaseLine(t *testing.T) {
	require.Equal(t, "claimed_until 2026-11-25T08:59:19Z (expired 41s ago)", leaseLine(delivery{LeaseExpires: at(-41 * time.Second)}, now))
	require.Equal(t, "claimed_until 2026-11-25T09:01:00Z (expires in 1m0s)", leaseLine(delivery{LeaseExpires: at(time.Minute)}, now))
	require.Empty(t, leaseLine(delivery{}, now))
}

func TestHoistGlobals(t *testing.T) {
	got, err := hoistGlobals([]string{"hosts", "list", "--url", "http://x", "--json", "--token-file=/t"})
	require.NoError(t, err)
	require.Equal(t, []string{"--url", "http://x", "--token-file=/t", "hosts", "list", "--json"}, got)
	_, err = hoistGlobals([]string{"hosts", "--url"})
	require.Error(t, err)
}

func TestParseSince(t *testing.T) {
	got, err := parseSince("24h", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-24*time.Hour), got)
	got, err = parseSince("2026-11-24T10:00:00Z", now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC), got)
	_, err = parseSince("-1h", now)
	require.Error(t, err)
}
