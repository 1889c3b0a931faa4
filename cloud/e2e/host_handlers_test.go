package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostHandlerOutcomes runs each handler kind through each outcome
// (success; retryable failure, then success on the retry; fatal failure;
// timeout, then success on the retry) on real processes, and checks that the
// host's ledger and the cloud agree on every delivery. The source's retry
// schedule is seconds here (newHostSetup), so the retries come quickly.
func TestHostHandlerOutcomes(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "outcomes")

	// The forward target decides by the GitHub delivery id: ok, retry (503
	// once), fatal (422, not retried: retry_4xx is off), slow (hangs past
	// the 1 s timeout once).
	app := startScriptedApp(t, func(r *http.Request, n int) (int, string) {
		switch id := r.Header.Get("X-GitHub-Delivery"); {
		case strings.HasPrefix(id, "retry") && n == 1:
			return 503, "busy, try later"
		case strings.HasPrefix(id, "fatal"):
			return 422, "unprocessable: no such repository here"
		case strings.HasPrefix(id, "slow") && n == 1:
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return 200, "too late"
		}
		return 200, "fine"
	})
	// The exec handler decides the same way; it counts its runs per delivery.
	runs := newRunLog(t)
	handler := script(t, `id="$RELAY_DELIVERY_ID"
echo "$id $RELAY_ATTEMPT" >> "$1"
n=$(grep -c "^$id " "$1")
case "$id" in
  github:retry*) if [ "$n" = 1 ]; then echo "temporary: database locked" >&2; exit 75; fi ;;
  github:fatal*) echo "bad input: cannot parse" >&2; exit 2 ;;
  github:slow*) if [ "$n" = 1 ]; then exec sleep 30; fi ;;
esac
echo "done $id"
`)
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{
		"workers": 8,
		"webhooks": map[string]any{
			"github": map[string]any{
				"enabled": true, "parallel": true, "timeout_s": 1,
				"routes": []any{
					map[string]any{"events": []string{"push"}, "forward": app.url, "retry_4xx": false},
					map[string]any{"events": []string{"issues"}, "exec": []string{handler, string(runs)}},
					map[string]any{"events": []string{"release"}, "exec": []string{handler, string(runs)}, "retry_nonzero_exit": false},
				},
			},
		},
	})

	push := hostPayload(t, "github/push.json")
	issues := hostPayload(t, "github/issue_comment.created.json")
	ids := map[string]string{}
	for _, c := range []struct{ name, event string }{
		{"ok-fwd", "push"}, {"retry-fwd", "push"}, {"fatal-fwd", "push"}, {"slow-fwd", "push"},
		{"ok-exec", "issues"}, {"retry-exec", "issues"}, {"fatal-exec", "release"}, {"slow-exec", "issues"},
	} {
		body := push
		if c.event != "push" {
			body = issues
		}
		ids[c.name] = sendGitHub(t, s.cloud.url, s.hostID, c.event, c.name, body)
	}

	settled := func(name string) bool {
		d := s.cloud.delivery(s.hostID, ids[name])
		return d.Delivery.Status == "acked" || d.Delivery.Status == "dlq"
	}
	eventually(t, 90*time.Second, "every delivery acked or dead-lettered", func() bool {
		for name := range ids {
			if !settled(name) {
				return false
			}
		}
		return true
	})

	type want struct {
		status   string // in the cloud
		attempts int    // in the cloud and in the ledger
		result   string // in the ledger
		failure  string // the first attempt's error, in the cloud's trail (and last_error for dlq)
		code     int    // response status or exit code of the last run
	}
	for name, w := range map[string]want{
		"ok-fwd":     {"acked", 1, "success", "", 200},
		"retry-fwd":  {"acked", 2, "success", "HTTP 503: busy, try later", 200},
		"fatal-fwd":  {"dlq", 1, "error", "HTTP 422: unprocessable: no such repository here", 422},
		"slow-fwd":   {"acked", 2, "success", "timeout after 1s", 200},
		"ok-exec":    {"acked", 1, "success", "", 0},
		"retry-exec": {"acked", 2, "success", "exit 75: temporary: database locked", 0},
		"fatal-exec": {"dlq", 1, "error", "exit 2: bad input: cannot parse", 2},
		"slow-exec":  {"acked", 2, "success", "timeout after 1s: process group killed", 0},
	} {
		id := ids[name]
		d := s.cloud.delivery(s.hostID, id)
		e, ok := h.ledgerEntry(id)
		require.True(t, ok, "%s: in the ledger", name)

		require.Equal(t, w.status, d.Delivery.Status, "%s: cloud status; trail: %s", name, d.reasons())
		require.Equal(t, w.attempts, d.Delivery.Attempts, "%s: cloud attempts", name)
		require.Equal(t, w.result, e.Result, "%s: ledger result", name)
		require.Equal(t, w.attempts, e.Attempts, "%s: ledger attempts (runs recorded)", name)
		require.Equal(t, w.attempts, e.CloudAttempt, "%s: the ledger knows the cloud's attempt", name)
		if strings.HasSuffix(name, "-fwd") {
			require.Equal(t, w.code, *e.ResponseStatus, name)
			require.Nil(t, e.ExitCode, name)
			require.Equal(t, len(app.requests(id)), w.attempts, "%s: one request per attempt", name)
		} else {
			require.Equal(t, w.code, *e.ExitCode, name)
			require.Equal(t, w.attempts, runs.count(id+" "), "%s: one run per attempt", name)
		}
		if w.failure == "" {
			require.Empty(t, e.Error, name)
			require.NotContains(t, d.reasons(), "nacked", name)
			continue
		}
		// The first attempt's failure reached the cloud as a nack.
		require.Contains(t, d.reasons(), "nacked by host", "%s: %s", name, d.reasons())
		if w.status == "dlq" {
			require.Equal(t, w.failure, d.Delivery.LastError, "%s: cloud and ledger agree on the error", name)
			require.Equal(t, w.failure, e.Error, name)
		} else {
			require.Contains(t, d.Delivery.LastError, w.failure, "%s: the cloud kept the failure", name)
			require.Empty(t, e.Error, "%s: the ledger holds the successful retry", name)
		}
	}

	// Outputs are recorded, truncated to what matters.
	e, _ := h.ledgerEntry(ids["ok-fwd"])
	require.Equal(t, "fine", e.Output)
	e, _ = h.ledgerEntry(ids["ok-exec"])
	require.Equal(t, "done "+ids["ok-exec"], e.Output)
	require.Equal(t, "push Codertocat/Hello-World (master) by Codertocat", mustLedger(t, h, ids["ok-fwd"]).Summary)
	// The forward target saw the retry as attempt 2, with the same key.
	reqs := app.requests(ids["retry-fwd"])
	require.Equal(t, []string{"1", "2"}, []string{reqs[0].Header.Get("X-Relay-Attempt"), reqs[1].Header.Get("X-Relay-Attempt")})
	for _, r := range reqs {
		require.Equal(t, ids["retry-fwd"], r.Header.Get("Idempotency-Key"))
	}
}

func mustLedger(t *testing.T, h *host, id string) hostLedgerEntry {
	t.Helper()
	e, ok := h.ledgerEntry(id)
	require.True(t, ok, "%s in the ledger", id)
	return e
}
