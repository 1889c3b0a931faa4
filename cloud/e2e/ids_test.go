package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// TestProviderChosenIDsAreDelivered: webhooks whose provider-chosen ids used
// to dead-letter them — a 60 KB X-GitHub-Delivery (a 200 KB one gave exec
// "argument list too long"; the cloud now refuses headers over 64 KiB with
// 431 before anything else), a signed Stripe event id with a NUL and a newline (forward: invalid
// header value; exec: NUL in the environment) — are stored under safe ids and
// handled on the first attempt by the real binaries.
func TestProviderChosenIDsAreDelivered(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "ids")
	const stSecret = "whsec_e2e_ids"
	require.Equal(t, 201, s.cloud.admin("PUT", "/api/hosts/"+s.hostID+"/sources/stripe", map[string]any{"secrets": []string{stSecret}}, nil))

	app := startScriptedApp(t, func(*http.Request, int) (int, string) { return 200, "fine" })
	runs := newRunLog(t)
	handler := script(t, `printf '%s %s\n' "$IDEMPOTENCY_KEY" "$RELAY_EVENT_TYPE" >> "$1"; echo ran`)
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{
		"webhooks": map[string]any{
			"github": map[string]any{"enabled": true, "parallel": true, "routes": []any{
				map[string]any{"events": []string{"push"}, "forward": app.url},
				map[string]any{"events": []string{"issues"}, "exec": []string{handler, string(runs)}},
			}},
			"stripe": map[string]any{"enabled": true, "parallel": true, "exec": []string{handler, string(runs)}, "routes": []any{
				map[string]any{"events": []string{"invoice.paid"}, "forward": app.url},
			}},
		},
	})

	long := strings.Repeat("d", 60<<10)
	ghFwd := sendGitHub(t, s.cloud.url, s.hostID, "push", "f"+long, hostPayload(t, "github/push.json"))
	ghExec := sendGitHub(t, s.cloud.url, s.hostID, "issues", "e"+long, hostPayload(t, "github/issue_comment.created.json"))
	stFwd := sendStripe(t, s.cloud.url, s.hostID, stSecret, []byte(`{"id":"evt_\u0000x\ny","object":"event","type":"invoice.paid"}`))
	stExec := sendStripe(t, s.cloud.url, s.hostID, stSecret, []byte(`{"id":"evt_\u0000x\nz","object":"event","type":"invoice.created\u001b[2J"}`))
	for _, id := range []string{ghFwd, ghExec, stFwd, stExec} {
		require.Regexp(t, `^(github|stripe):h-[0-9a-f]{32}:[0-9]+$`, id)
	}

	for _, id := range []string{ghFwd, ghExec, stFwd, stExec} {
		eventually(t, 30*time.Second, "acked: "+id, func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })
		d := s.cloud.delivery(s.hostID, id)
		require.Equal(t, 1, d.Delivery.Attempts, d.reasons())
		e, ok := h.ledgerEntry(id)
		require.True(t, ok)
		require.Equal(t, "success", e.Result, e.Error)
	}
	for _, id := range []string{ghFwd, stFwd} {
		reqs := app.requests(id)
		require.Len(t, reqs, 1)
		require.Equal(t, id, reqs[0].Header.Get(shared.HeaderIdempotencyKey))
	}
	require.Equal(t, long[:100], app.requests(ghFwd)[0].Header.Get("X-GitHub-Delivery")[1:101], "the provider's header is forwarded as sent")
	lines := runs.lines()
	require.ElementsMatch(t, []string{ghExec + " issues", stExec + " invoice.created[2J"}, lines)

	// The same Stripe event again is a duplicate: its safe id is stable.
	body := []byte(`{"id":"evt_\u0000x\ny","object":"event","type":"invoice.paid"}`)
	status, resp := postStripe(t, s.cloud.url, s.hostID, stSecret, body)
	require.Equal(t, 200, status)
	require.Equal(t, shared.IntakeDuplicate, resp.Status)
}

func sendStripe(t *testing.T, cloudURL, hostID, secret string, body []byte) string {
	t.Helper()
	status, resp := postStripe(t, cloudURL, hostID, secret, body)
	require.Equal(t, 200, status)
	require.Equal(t, shared.IntakeQueued, resp.Status)
	return resp.DeliveryID
}

func postStripe(t *testing.T, cloudURL, hostID, secret string, body []byte) (int, shared.IntakeResponse) {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequest("POST", cloudURL+"/api/webhooks/"+hostID+"/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hexMAC(sha256.New, secret, ts, ".", string(body)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out shared.IntakeResponse
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}
