package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The host's crash windows, each with a SIGKILL at a precise point:
//
//	(a) while the handler runs              → it runs again (at-least-once)
//	(b) after the handler, before the ledger → it runs again (at-least-once)
//	(c) after the ledger, before the ack     → it never runs again
//
// In (a) and (b) the host cannot know whether the handler's side effect
// happened, so the cloud's redelivery runs it again, with the same
// Idempotency-Key (X-Relay-Delivery-Id / IDEMPOTENCY_KEY): that key is what
// lets the handler's downstream make the repeat harmless. In (c) the ledger
// row and its ack were committed together, so the ack goes out after the
// restart and nothing runs twice. TestHostCrashBeforeAck (relay_test.go)
// covers (c) with the network cut and the lease expired; here the crash
// comes from the host's test-only fault hook (RELAY_HOST_TEST_CRASH).
//
// After a crash the lease (2 s here) must expire and the cloud waits the
// source's retry delay (2 s in these tests) before handing the webhook out
// again. The hosts here heartbeat: on a socket the cloud sees the crash
// close it and hands the webhook out again at once
// (TestHostSocketKilledAfterLedgerBeforeAck).

// TestHostKilledBeforeLedgerWrite covers (a) and (b), each on its own host
// of one cloud, side by side so that their waits for the redelivery overlap.
//
// (a), for both handler kinds: the forward target sees its connection drop,
// and the exec program dies with the host (Linux parent-death signal) rather
// than running on unobserved. (b): the handler succeeded, but the host died
// (its test-only fault hook) before writing its ledger row.
func TestHostKilledBeforeLedgerWrite(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "crash-a", "RELAY_LEASE=2s")
	idB, codeB := s.cloud.newHost("crash-b", secret)
	s.cloud.fastRetries(idB)
	sB := &hostSetup{cloud: s.cloud, hostID: idB, code: codeB}

	// (a): both handlers hang on their first run.
	app := startScriptedApp(t, func(r *http.Request, n int) (int, string) {
		if n == 1 {
			<-r.Context().Done() // hangs until the host dies
			return 500, "gone"
		}
		return 200, "fine"
	})
	runsA := newRunLog(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	hangOnce := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT $IDEMPOTENCY_KEY" >> "$1"
if [ "$RELAY_ATTEMPT" = 1 ]; then echo $$ > "$2"; exec sleep 60; fi
echo finished
`)
	hA := s.startConfiguredHost(t, s.cloud.url, map[string]any{"transport": "heartbeat", "webhooks": map[string]any{
		"github": map[string]any{"enabled": true, "parallel": true, "routes": []any{
			map[string]any{"events": []string{"push"}, "forward": app.url},
			map[string]any{"events": []string{"issues"}, "exec": []string{hangOnce, string(runsA), pidFile}},
		}},
	}})
	// (b): the handler returns at once; the host kills itself right after.
	runsB := newRunLog(t)
	record := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT $IDEMPOTENCY_KEY" >> "$1"
`)
	hB := sB.startConfiguredHost(t, s.cloud.url, execTo([]string{record, string(runsB)}, map[string]any{"transport": "heartbeat"}),
		"RELAY_HOST_TEST_CRASH=after-handler")

	fwd := sendGitHub(t, s.cloud.url, s.hostID, "push", "a-forward", hostPayload(t, "github/push.json"))
	ex := sendGitHub(t, s.cloud.url, s.hostID, "issues", "a-exec", hostPayload(t, "github/issue_comment.created.json"))
	idb := sendGitHub(t, s.cloud.url, sB.hostID, "push", "b-crash", hostPayload(t, "github/push.json"))

	// (a): kill while both run.
	// The pid file exists from the moment the shell opens it, before its
	// pid is written: an empty one read /proc//stat, the machine's own
	// statistics, which never say the handler died.
	var pid int
	eventually(t, 30*time.Second, "both handlers running", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && len(app.requests(fwd)) == 1
	})
	hA.kill()
	eventually(t, 10*time.Second, "the exec handler died with the host", func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(stat), ") Z ")
	})
	for _, id := range []string{fwd, ex} {
		_, ok := hA.ledgerShow(id)
		require.False(t, ok, "%s: nothing recorded: the host died mid-run", id)
	}

	// (b): the host killed itself after the handler returned.
	require.Equal(t, -1, hB.waitExit(30*time.Second), "killed by its own SIGKILL")
	require.Contains(t, tail(hB.logPath, 20), "RELAY_HOST_TEST_CRASH: killing the host at after-handler")
	require.Contains(t, tail(hB.logPath, 400), "test fault hook armed")
	require.Equal(t, []string{idb + " 1 " + idb}, runsB.lines(), "the handler ran")
	_, ok := hB.ledgerShow(idb)
	require.False(t, ok, "nothing recorded")
	require.NotEqual(t, "acked", s.cloud.delivery(sB.hostID, idb).Delivery.Status)

	hA.restartWith()
	hB.restartWith()
	eventually(t, 90*time.Second, "all acked after the redeliveries", func() bool {
		return s.cloud.delivery(s.hostID, fwd).Delivery.Status == "acked" && s.cloud.delivery(s.hostID, ex).Delivery.Status == "acked" &&
			s.cloud.delivery(sB.hostID, idb).Delivery.Status == "acked"
	})

	// The handlers ran twice: the at-least-once window. Both runs carried the
	// same Idempotency-Key, for the handler's downstream to recognise the repeat.
	reqs := app.requests(fwd)
	require.Len(t, reqs, 2)
	require.Equal(t, "1", reqs[0].Header.Get("X-Relay-Attempt"))
	require.Equal(t, "2", reqs[1].Header.Get("X-Relay-Attempt"))
	require.Equal(t, fwd, reqs[0].Header.Get("Idempotency-Key"))
	require.Equal(t, fwd, reqs[1].Header.Get("Idempotency-Key"))
	require.Equal(t, []string{ex + " 1 " + ex, ex + " 2 " + ex}, runsA.lines())
	require.Equal(t, []string{idb + " 1 " + idb, idb + " 2 " + idb}, runsB.lines())
	for _, c := range []struct {
		h          *host
		hostID, id string
	}{{hA, s.hostID, fwd}, {hA, s.hostID, ex}, {hB, sB.hostID, idb}} {
		d := s.cloud.delivery(c.hostID, c.id)
		require.Equal(t, 2, d.Delivery.Attempts, d.reasons())
		require.Contains(t, d.reasons(), "lease expired")
		e := mustLedger(t, c.h, c.id)
		require.Equal(t, "success", e.Result)
		require.Equal(t, 1, e.Attempts, "%s: one run recorded: the first left no trace", c.id)
		require.Equal(t, 2, e.CloudAttempt)
	}
}

// TestHostKilledAfterLedgerBeforeAck is (c): the outcome and its ack were
// committed together; the host dies before the ack goes out. The row is
// readable with `host ledger show` while the host is down; after the
// restart the ack is sent from the outbox and the handler never runs again.
func TestHostKilledAfterLedgerBeforeAck(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "crash-c")
	runs := newRunLog(t)
	handler := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT" >> "$1"
echo handled
`)
	h := s.startConfiguredHost(t, s.cloud.url, execTo([]string{handler, string(runs)}, map[string]any{"transport": "heartbeat"}),
		"RELAY_HOST_TEST_CRASH=after-ledger")
	id := sendGitHub(t, s.cloud.url, s.hostID, "push", "c-crash", hostPayload(t, "github/push.json"))

	require.Equal(t, -1, h.waitExit(30*time.Second))
	require.Contains(t, tail(h.logPath, 20), "RELAY_HOST_TEST_CRASH: killing the host at after-ledger")
	e, ok := h.ledgerShow(id)
	require.True(t, ok, "the outcome was committed before the crash")
	require.Equal(t, "success", e.Result)
	require.Equal(t, 0, *e.ExitCode)
	require.Equal(t, "handled", e.Output)
	// Written, not acked: marked delivered by the ack that did not come,
	// or within a second of its write (on SQLite a long poll's answer is
	// marked as a socket's push is).
	eventually(t, 10*time.Second, "marked delivered, never acked", func() bool {
		return s.cloud.delivery(s.hostID, id).Delivery.Status == "delivered"
	})
	d := s.cloud.delivery(s.hostID, id)
	require.NotContains(t, d.reasons(), "acked", "the ack did not go out")

	h.restartWith()
	eventually(t, 30*time.Second, "acked from the outbox after the restart", func() bool {
		return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked"
	})
	d = s.cloud.delivery(s.hostID, id)
	require.Equal(t, 1, d.Delivery.Attempts, d.reasons())
	require.Equal(t, []string{id + " 1"}, runs.lines(), "the handler ran exactly once")
	e = mustLedger(t, h, id)
	require.Equal(t, 1, e.Attempts)
}
