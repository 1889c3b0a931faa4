package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// Helpers of the host end-to-end tests (host_*_test.go): a host run with a
// configuration of the test's choosing, the host's ledger and the cloud's
// view of one delivery, scripted receivers and exec handlers.

// hostPayload reads a real provider payload kept with the host's own tests.
func hostPayload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "host", "summary", "testdata", name))
	require.NoError(t, err)
	return b
}

// hostSetup is a cloud (on SQLite) with one host created and claimable.
type hostSetup struct {
	cloud  *cloud
	hostID string
	code   string
}

// newHostSetup starts a cloud with extra environment and creates a host with
// a github source signed with the package's secret.
func newHostSetup(t *testing.T, name string, cloudEnv ...string) *hostSetup {
	t.Helper()
	c := startCloud(t, "sqlite:"+filepath.Join(t.TempDir(), "cloud.db"), cloudEnv...)
	id, code := c.newHost(name, secret)
	c.fastRetries(id)
	return &hostSetup{cloud: c, hostID: id, code: code}
}

// fastRetries gives the host's github source a retry schedule of seconds
// (the same five attempts), so tests that wait for a redelivery do not wait
// the default 30 s.
func (c *cloud) fastRetries(hostID string) {
	c.t.Helper()
	require.Equal(c.t, 200, c.admin("PUT", "/api/hosts/"+hostID+"/sources/github",
		map[string]any{"secrets": []string{secret}, "retry_schedule_s": []int{0, 2, 2, 2, 2}, "options": guardOff}, nil))
}

// startConfiguredHost claims s's host and runs it with cfg (see startHost).
func (s *hostSetup) startConfiguredHost(t *testing.T, cloudURL string, cfg map[string]any, env ...string) *host {
	t.Helper()
	return startHost(t, cloudURL, s.code, cfg, env...)
}

// restartWith kills the host (SIGKILL) and starts it again on the same
// state directory with env replacing the test-specific environment.
func (h *host) restartWith(env ...string) {
	h.t.Helper()
	h.kill()
	h.env = append([]string{"RELAY_HOST_STATE=" + h.state, "RELAY_HOST_LISTEN=" + h.listen}, env...)
	h.start()
}

// waitExit waits for the host process to end by itself and returns its
// exit code (-1 for a signal).
func (h *host) waitExit(within time.Duration) int {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(within):
		h.t.Fatalf("host still running after %s\n%s", within, tail(h.logPath, 40))
	}
	var ee *exec.ExitError
	if errors.As(h.exitErr, &ee) {
		return ee.ExitCode()
	}
	require.NoError(h.t, h.exitErr)
	return 0
}

// hostLedgerEntry is a ledger row as the host's local API shows it.
type hostLedgerEntry struct {
	DeliveryID     string            `json:"delivery_id"`
	Source         string            `json:"source"`
	EventType      string            `json:"event_type"`
	Result         string            `json:"result"`
	Attempts       int               `json:"attempts"`
	CloudAttempt   int               `json:"cloud_attempt"`
	Error          string            `json:"error"`
	Handler        string            `json:"handler"`
	ResponseStatus *int              `json:"response_status"`
	ExitCode       *int              `json:"exit_code"`
	Output         string            `json:"output"`
	Summary        string            `json:"summary"`
	Fields         map[string]string `json:"fields"`
}

// ledgerEntry reads a delivery from the running host's local API; ok is
// false while the ledger has no row for it.
func (h *host) ledgerEntry(id string) (hostLedgerEntry, bool) {
	resp, err := http.Get("http://" + h.listen + "/webhooks/ledger/" + id)
	if err != nil {
		return hostLedgerEntry{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return hostLedgerEntry{}, false
	}
	var e hostLedgerEntry
	if json.NewDecoder(resp.Body).Decode(&e) != nil {
		return hostLedgerEntry{}, false
	}
	return e, true
}

// ledgerShow reads a delivery with `host ledger show --json`, which opens the
// ledger file read-only (the host need not run); ok is false if absent.
func (h *host) ledgerShow(id string) (hostLedgerEntry, bool) {
	h.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "host"), "ledger", "show", id, "--json", "--state", h.state)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && strings.Contains(string(ee.Stderr), "is not in the ledger") {
		return hostLedgerEntry{}, false
	}
	require.NoError(h.t, err, string(out))
	var e hostLedgerEntry
	require.NoError(h.t, json.Unmarshal(out, &e), string(out))
	return e, true
}

// cloudDelivery is one delivery as GET /api/hosts/:id/webhooks/:deliveryId
// shows it, with its audit trail.
type cloudDelivery struct {
	Delivery struct {
		DeliveryID string `json:"delivery_id"`
		Status     string `json:"status"`
		Attempts   int    `json:"attempts"`
		LastError  string `json:"last_error"`
	} `json:"delivery"`
	Events []struct {
		From    string `json:"from"`
		To      string `json:"to"`
		Reason  string `json:"reason"`
		Attempt int    `json:"attempt"`
	} `json:"events"`
	HostResult *struct {
		Result string `json:"result"`
		Error  string `json:"error"`
	} `json:"host_result"`
}

func (c *cloud) delivery(hostID, id string) cloudDelivery {
	c.t.Helper()
	var d cloudDelivery
	require.Equal(c.t, 200, c.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+id, nil, &d))
	return d
}

// reasons lists the audit trail's reasons, for assertions and messages.
func (d cloudDelivery) reasons() string {
	var rs []string
	for _, e := range d.Events {
		rs = append(rs, e.From+"→"+e.To+": "+e.Reason)
	}
	return strings.Join(rs, " | ")
}

// sendGitHub signs and sends a GitHub webhook and returns its delivery id.
func sendGitHub(t *testing.T, cloudURL, hostID, event, delivery string, body []byte) string {
	t.Helper()
	status, resp, err := signGitHub(secret, event, delivery, body).send(cloudURL, hostID)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Equal(t, shared.IntakeQueued, resp.Status)
	return resp.DeliveryID
}

// sendSlack signs a Slack Events API request the way Slack does (v0 over
// "v0:timestamp:body"), sends it to source and returns its delivery id.
func sendSlack(t *testing.T, cloudURL, hostID, source, slackSecret string, body []byte) string {
	t.Helper()
	id, status := postSlack(t, cloudURL, hostID, source, slackSecret, body)
	require.Equal(t, shared.IntakeQueued, status)
	return id
}

func postSlack(t *testing.T, cloudURL, hostID, source, slackSecret string, body []byte) (string, string) {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(slackSecret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	req, err := http.NewRequest("POST", cloudURL+"/api/webhooks/"+hostID+"/"+source, strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out shared.IntakeResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, 200, resp.StatusCode)
	return out.DeliveryID, out.Status
}

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "handler.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

// runLog is a file exec handlers append one line to per run.
type runLog string

func newRunLog(t *testing.T) runLog { return runLog(filepath.Join(t.TempDir(), "runs.log")) }

// lines returns the lines written so far.
func (r runLog) lines() []string {
	b, _ := os.ReadFile(string(r))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// count returns how many lines start with prefix.
func (r runLog) count(prefix string) int {
	n := 0
	for _, l := range r.lines() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// scriptedApp is a local app behind the host whose answer per request is
// decided by a function; it records every request.
type scriptedApp struct {
	url    string
	mu     sync.Mutex
	seen   []*http.Request
	bodies [][]byte
}

func startScriptedApp(t *testing.T, answer func(r *http.Request, n int) (int, string)) *scriptedApp {
	t.Helper()
	app := &scriptedApp{}
	app.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		app.mu.Lock()
		app.seen = append(app.seen, r.Clone(r.Context()))
		app.bodies = append(app.bodies, b)
		n := 0
		for _, s := range app.seen {
			if s.Header.Get(shared.HeaderDeliveryID) == r.Header.Get(shared.HeaderDeliveryID) {
				n++
			}
		}
		app.mu.Unlock()
		status, body := answer(r, n)
		w.WriteHeader(status)
		io.WriteString(w, body)
	})) + "/hook"
	return app
}

// requests returns the attempts seen for a delivery id, in order.
func (a *scriptedApp) requests(deliveryID string) []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*http.Request
	for _, r := range a.seen {
		if r.Header.Get(shared.HeaderDeliveryID) == deliveryID {
			out = append(out, r)
		}
	}
	return out
}
