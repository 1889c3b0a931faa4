package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// statusReceiver answers every request with the status it holds (200 at
// first).
type statusReceiver struct {
	url    string
	status atomic.Int32
}

func startStatusReceiver(t *testing.T) *statusReceiver {
	rc := &statusReceiver{}
	rc.status.Store(200)
	rc.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(rc.status.Load()))
	})) + "/hook"
	return rc
}

// retrySchedule sets the github source's retry schedule and attempts.
func (c *cloud) retrySchedule(hostID string, schedule []int, maxAttempts int) {
	c.t.Helper()
	require.Equal(c.t, 200, c.admin("PUT", "/api/hosts/"+hostID+"/sources/github",
		map[string]any{"retry_schedule_s": schedule, "max_attempts": maxAttempts, "options": guardOff}, nil))
}

// waitStatus waits until a delivery is in status.
func (c *cloud) waitStatus(hostID, deliveryID, status string) {
	c.t.Helper()
	eventually(c.t, 30*time.Second, deliveryID+" "+status, func() bool {
		var out struct {
			Delivery struct {
				Status string `json:"status"`
			} `json:"delivery"`
		}
		return c.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+deliveryID, nil, &out) == 200 && out.Delivery.Status == status
	})
}

// sendEvent sends a signed pull_request webhook with event id eventID to the
// host and returns its delivery id.
func (c *cloud) sendEvent(hostID, eventID string) string {
	c.t.Helper()
	st, resp, err := signGitHub(secret, "pull_request", eventID, []byte(`{"action":"opened","n":"`+eventID+`"}`)).send(c.url, hostID)
	require.NoError(c.t, err)
	require.Equal(c.t, 200, st)
	return resp.DeliveryID
}

type inspected struct {
	Delivery struct {
		Status string `json:"status"`
	} `json:"delivery"`
	HostResult *struct {
		Result         string `json:"result"`
		Attempt        int    `json:"attempt"`
		ResponseStatus *int   `json:"response_status"`
		Handler        string `json:"handler"`
	} `json:"host_result"`
	NextAction struct {
		RetrySafe bool   `json:"retry_safe"`
		Action    string `json:"action"`
		Why       string `json:"why"`
	} `json:"next_action"`
}

// reconcile runs `host reconcile` on a state directory.
func reconcile(t *testing.T, state string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "host"), append([]string{"reconcile", "--state", state, "--since", "1h"}, args...)...)
	return runExit(t, cmd)
}

// TestInspectAndReconcile: `cloud ctl inspect` shows the host ledger's
// result of real runs and the right next action for an acked delivery, a
// retrying one whose handler failed, a dead letter, and a retrying one whose
// side effect the host recorded as done; `host reconcile` finds an ack cut
// off by a crash, a replaced ledger and a dead letter that had in fact
// succeeded, and --fix sends the missing ack; `cloud ctl tail` follows.
func TestInspectAndReconcile(t *testing.T) {
	t.Parallel()
	eachEngine(t, inspectAndReconcile)
}

func inspectAndReconcile(t *testing.T, dbURL string) {
	c := startCloud(t, dbURL, "RELAY_LEASE=2s")
	u := c.url
	rc := startStatusReceiver(t)

	tail := startProc(t, "cloud", []string{"RELAY_URL=" + u, "RELAY_ADMIN_TOKEN=" + adminToken},
		"ctl", "tail", "--last", "0", "--interval", "200ms")

	id1, code1 := c.newHost("inspect-a", secret)
	h1 := startHost(t, u, code1, forwardTo(rc.url, nil))

	// Acked: the host's success is shown, nothing to do.
	w1 := c.sendEvent(id1, "evt-acked")
	c.waitStatus(id1, w1, "acked")
	out := ctlOK(t, u, "inspect", w1)
	require.Contains(t, out, "host ledger  success at attempt 1")
	require.Contains(t, out, "edge         signature verified, stored: received")
	require.Regexp(t, `queued → delivering\s+pushed over the host.s socket`, out, "the transport that carried it: the host is on its socket")
	require.Contains(t, out, "next_action  none")
	var in inspected
	ctlJSON(t, u, &in, "inspect", "evt-acked") // by the provider's event id
	require.Equal(t, "success", in.HostResult.Result)
	require.Equal(t, 200, *in.HostResult.ResponseStatus)
	require.Contains(t, in.HostResult.Handler, "forward")
	require.Equal(t, "none", in.NextAction.Action)

	// Retrying, the handler failed: retry-safe.
	c.retrySchedule(id1, []int{0, 3600}, 2)
	rc.status.Store(500)
	wf := c.sendEvent(id1, "evt-failed")
	c.waitStatus(id1, wf, "retrying")
	eventually(t, 10*time.Second, "the failed run reported", func() bool {
		ctlJSON(t, u, &in, "inspect", wf)
		return in.HostResult != nil
	})
	require.Equal(t, "error", in.HostResult.Result)
	require.True(t, in.NextAction.RetrySafe)
	require.Equal(t, "wait", in.NextAction.Action)
	require.Contains(t, in.NextAction.Why, "side effect not committed")
	out = ctlOK(t, u, "inspect", wf)
	require.Contains(t, out, "host ledger  error at attempt 1")
	require.Contains(t, out, "HTTP 500")
	require.Contains(t, out, "next_action  wait (retry-safe): the handler failed")

	// Dead-lettered after its one attempt failed: retry-safe, retry it.
	c.retrySchedule(id1, []int{0}, 1)
	wd := c.sendEvent(id1, "evt-dead")
	c.waitStatus(id1, wd, "dlq")
	eventually(t, 10*time.Second, "the dead letter's run reported", func() bool {
		ctlJSON(t, u, &in, "inspect", wd)
		return in.HostResult != nil
	})
	require.Equal(t, "retry", in.NextAction.Action)
	require.True(t, in.NextAction.RetrySafe)
	require.Contains(t, ctlOK(t, u, "inspect", wd), "next_action  retry (retry-safe): dead-lettered after 1 attempts")

	// Retrying while the host's ledger records the side effect as done: a
	// host hands back unstarted a webhook its ledger already records as
	// handled (it was stopping), nacking it with the ledger's result. This
	// test plays that host at the protocol edge.
	id3, code3 := c.newHost("protocol", secret)
	c.retrySchedule(id3, []int{0, 3600}, 5)
	var claim shared.ClaimResponse
	require.Equal(t, 200, post(t, u+shared.PathClaim, "", shared.ClaimRequest{ClaimCode: code3}, &claim))
	wx := c.sendEvent(id3, "evt-done-elsewhere")
	var hb shared.HeartbeatResponse
	require.Equal(t, 200, post(t, u+shared.PathHeartbeat, claim.Token, shared.HeartbeatRequest{}, &hb))
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, 200, post(t, u+shared.PathHeartbeat, claim.Token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0),
		WebhookNacks:   []shared.Nack{{DeliveryID: wx, Error: "host stopping: not started", Retryable: true, Attempt: 1}},
		WebhookResults: []shared.WebhookResult{{DeliveryID: wx, Attempt: 1, Result: "success", Handler: "forward http://app/hook", DurationMS: 7}},
	}, &hb))
	ctlJSON(t, u, &in, "inspect", wx)
	require.Equal(t, "retrying", in.Delivery.Status)
	require.False(t, in.NextAction.RetrySafe)
	require.Contains(t, in.NextAction.Why, "the side effect is done")
	require.Contains(t, ctlOK(t, u, "inspect", wx), "next_action  wait (NOT retry-safe)")

	// Reconciliation. A replaced ledger: host 1 starts over on an empty one,
	// and a crash right after its ledger recorded a run cuts its ack off.
	h1.kill()
	for _, f := range []string{"ledger.db", "ledger.db-wal", "ledger.db-shm"} {
		os.Remove(filepath.Join(h1.state, f))
	}
	l, err := ledger.Open(context.Background(), filepath.Join(h1.state, "ledger.db"))
	require.NoError(t, err)
	require.NoError(t, l.Close())
	c.retrySchedule(id1, []int{0, 3600}, 5)
	rc.status.Store(200)
	h1.restartWith("RELAY_HOST_TEST_CRASH=after-ledger")
	w2 := c.sendEvent(id1, "evt-ack-cut")
	h1.waitExit(30 * time.Second)
	c.waitStatus(id1, w2, "retrying") // its lease ended

	// A dead letter that had in fact succeeded: host 2 crashes the same way
	// with the webhook's one attempt.
	id2, code2 := c.newHost("inspect-b", secret)
	c.retrySchedule(id2, []int{0}, 1)
	h2 := startHost(t, u, code2, forwardTo(rc.url, nil), "RELAY_HOST_TEST_CRASH=after-ledger")
	w3 := c.sendEvent(id2, "evt-dead-but-done")
	h2.waitExit(30 * time.Second)
	c.waitStatus(id2, w3, "dlq")

	code, out := reconcile(t, h1.state)
	require.Equal(t, 4, code, out)
	require.Contains(t, out, "2 disagreements")
	require.Contains(t, out, "ack-pending  "+w2)
	require.Contains(t, out, "its ack is still in the outbox")
	require.Contains(t, out, "acked-not-in-ledger  "+w1)
	require.Contains(t, out, "this ledger was replaced")
	require.NotContains(t, out, wf, "failed here and there: they agree")
	require.NotContains(t, out, wd)
	code, out = reconcile(t, h1.state, "--json")
	require.Equal(t, 4, code, out)
	var rep struct {
		Disagreements []struct {
			DeliveryID string `json:"delivery_id"`
			Kind       string `json:"kind"`
		} `json:"disagreements"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Disagreements, 2)

	code, out = reconcile(t, h2.state)
	require.Equal(t, 4, code, out)
	require.Contains(t, out, "dead-letter-but-done  "+w3)
	require.Contains(t, out, "the side effect is done")
	c.waitStatus(id2, w3, "dlq") // reconcile alone changes nothing
	// The cloud alone cannot tell whether that handler ran: inspect says so.
	ctlJSON(t, u, &in, "inspect", w3)
	require.Nil(t, in.HostResult)
	require.Equal(t, "investigate", in.NextAction.Action)
	require.False(t, in.NextAction.RetrySafe)
	require.Contains(t, in.NextAction.Why, "whether the handler ran is unknown")
	code, out = reconcile(t, h2.state, "--fix")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "the ledger and the cloud agree")
	c.waitStatus(id2, w3, "acked")

	// --fix sends the ack that was cut off, with the ledger's result.
	code, out = reconcile(t, h1.state, "--fix")
	require.Equal(t, 4, code, out)
	require.Contains(t, out, "sent 1 ack the cloud was missing: "+w2)
	require.Contains(t, out, "1 disagreement since")
	require.NotContains(t, out, "ack-pending")
	c.waitStatus(id1, w2, "acked")
	ctlJSON(t, u, &in, "inspect", w2)
	require.Equal(t, "success", in.HostResult.Result)
	require.Equal(t, "none", in.NextAction.Action)

	// tail saw every delivery come in and move on.
	eventually(t, 10*time.Second, "tail shows the transitions", func() bool {
		log := readFile(tail.logPath)
		return strings.Contains(log, w1+"  - → queued") && strings.Contains(log, w2+"  delivering → delivered") &&
			strings.Contains(log, w2+"  retrying → acked")
	})
	for _, line := range strings.Split(strings.TrimSpace(readFile(tail.logPath)), "\n") {
		require.Equal(t, 1, strings.Count(readFile(tail.logPath), line), "each transition once: %s", line)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// post sends a JSON request with a bearer token and decodes the answer.
func post(t *testing.T, url, token string, in, out any) int {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	req, err := http.NewRequest("POST", url, strings.NewReader(string(b)))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}
