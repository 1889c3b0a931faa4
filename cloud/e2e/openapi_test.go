package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/openapi/openapitest"
	"github.com/relaykit/relay/shared"
)

// apiCaller calls the real cloud and checks every answer against the
// OpenAPI document, recording which operations answered 2xx.
type apiCaller struct {
	t   *testing.T
	doc *openapitest.Doc
	url string
	ok  map[string]bool
}

func (a *apiCaller) call(method, path, bearer string, in any) (int, []byte) {
	a.t.Helper()
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(v)
	default:
		b, err := json.Marshal(v)
		require.NoError(a.t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, body)
	require.NoError(a.t, err)
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return a.do(req)
}

func (a *apiCaller) do(req *http.Request) (int, []byte) {
	a.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	op, ok := a.doc.Match(req.Method, req.URL.EscapedPath())
	require.True(a.t, ok, "%s %s matches no documented operation", req.Method, req.URL.Path)
	require.NoError(a.t, a.doc.ValidateResponse(op, resp.StatusCode, resp.Header.Get("Content-Type"), b))
	if resp.StatusCode/100 == 2 {
		a.ok[op.String()] = true
	}
	return resp.StatusCode, b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(b, v), string(b))
}

// TestOpenAPIResponses: every operation of the OpenAPI document, called on
// the real cloud binary (on SQLite and on Postgres), answers what the document says — successes and
// errors, bodies validated against its schemas — and every documented
// operation is called here at least once with a 2xx answer, so a new route
// gets a call (and its answer a check) in this test too.
func TestOpenAPIResponses(t *testing.T) {
	for name, db := range engines(t) {
		t.Run(name, func(t *testing.T) { openAPIResponses(t, db(t)) })
	}
}

func openAPIResponses(t *testing.T, dbURL string) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	c := startCloud(t, dbURL)
	a := &apiCaller{t: t, doc: doc, url: c.url, ok: map[string]bool{}}

	for _, p := range []string{"/healthz", "/readyz", "/api/openapi.json"} {
		st, _ := a.call("GET", p, "", nil)
		require.Equal(t, 200, st, p)
	}
	st, _ := a.call("GET", "/metrics", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", "/api/hosts", "", nil)
	require.Equal(t, 401, st)
	st, _ = a.call("GET", "/api/hosts", "wrong-token-of-at-least-32-characters", nil)
	require.Equal(t, 401, st)

	st, b := a.call("POST", "/api/hosts", adminToken, map[string]string{"name": "openapi"})
	require.Equal(t, 201, st)
	var created shared.CreateHostResponse
	decode(t, b, &created)
	hostID := created.ID
	st, _ = a.call("POST", "/api/hosts", adminToken, map[string]string{"name": ""})
	require.Equal(t, 400, st)
	st, _ = a.call("GET", "/api/hosts", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", "/api/hosts/"+hostID, adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", "/api/hosts/h_unknown", adminToken, nil)
	require.Equal(t, 404, st)
	st, _ = a.call("PATCH", "/api/hosts/"+hostID, adminToken, map[string]any{"rate_limit_per_min": 600})
	require.Equal(t, 200, st)

	src := "/api/hosts/" + hostID + "/sources/github"
	st, _ = a.call("PUT", src, adminToken, map[string]any{"secrets": []string{secret}})
	require.Equal(t, 201, st)
	st, _ = a.call("PUT", src, adminToken, map[string]any{"events": []string{"push", "pull_request"}})
	require.Equal(t, 200, st)
	st, _ = a.call("PUT", src, adminToken, map[string]any{"enabled": "yes"})
	require.Equal(t, 400, st)
	st, _ = a.call("GET", src, adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", "/api/hosts/"+hostID+"/sources", adminToken, nil)
	require.Equal(t, 200, st)

	st, _ = a.call("POST", "/api/hosts/claim", "", map[string]string{"claim_code": "AAAA-BBBB-CCCC-DDDD"})
	require.Equal(t, 401, st)
	st, b = a.call("POST", "/api/hosts/claim", "", shared.ClaimRequest{ClaimCode: created.ClaimCode, AgentVersion: "openapi-test"})
	require.Equal(t, 200, st)
	var claimed shared.ClaimResponse
	decode(t, b, &claimed)
	st, b = a.call("POST", "/api/hosts/token", "", shared.TokenRequest{HostID: hostID, HostCredential: claimed.HostCredential})
	require.Equal(t, 200, st)
	var tok shared.TokenResponse
	decode(t, b, &tok)

	// Intake: stored, a duplicate, a bad signature, an unknown host.
	push := signGitHub(secret, "push", "openapi-1", []byte(`{"ref":"refs/heads/main"}`))
	intake := func(w githubWebhook, host string) (int, []byte) {
		req, _ := http.NewRequest("POST", c.url+"/api/webhooks/"+host+"/github", bytes.NewReader(w.body))
		for k, v := range w.headers {
			req.Header.Set(k, v)
		}
		return a.do(req)
	}
	st, b = intake(push, hostID)
	require.Equal(t, 200, st, string(b))
	var queued shared.IntakeResponse
	decode(t, b, &queued)
	st, _ = intake(push, hostID)
	require.Equal(t, 200, st)
	st, _ = intake(signGitHub("not the secret", "push", "openapi-2", push.body), hostID)
	require.Equal(t, 401, st)
	st, _ = intake(push, "h_unknown")
	require.Equal(t, 404, st)

	// The host leases the webhook and fails it for good: a dead letter.
	heartbeat := func(req shared.HeartbeatRequest) shared.HeartbeatResponse {
		st, b := a.call("POST", "/api/hosts/heartbeat", tok.Token, req)
		require.Equal(t, 200, st, string(b))
		var hb shared.HeartbeatResponse
		decode(t, b, &hb)
		return hb
	}
	hb := heartbeat(shared.HeartbeatRequest{AgentVersion: "openapi-test", MaxWebhooks: shared.Ptr(10)})
	require.Len(t, hb.Webhooks, 1)
	heartbeat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: queued.DeliveryID, Error: "no", Retryable: false}}})
	st, _ = a.call("POST", "/api/hosts/heartbeat", "not-a-token", shared.HeartbeatRequest{})
	require.Equal(t, 401, st)

	// The socket: refused as documented, and upgraded (101, no body).
	st, _ = a.call("GET", shared.PathSocket, tok.Token, nil)
	require.Equal(t, 400, st, "not an upgrade")
	st, _ = a.call("GET", shared.PathSocket, "not-a-token", nil)
	require.Equal(t, 401, st)
	ws, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(a.url, "http")+shared.PathSocket,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok.Token}}})
	require.NoError(t, err)
	op, ok := doc.Match("GET", shared.PathSocket)
	require.True(t, ok)
	require.NoError(t, doc.ValidateResponse(op, resp.StatusCode, resp.Header.Get("Content-Type"), nil))
	a.ok[op.String()] = true
	ws.Close(websocket.StatusNormalClosure, "")

	deliveries := "/api/hosts/" + hostID + "/webhooks"
	one := deliveries + "/" + url.PathEscape(queued.DeliveryID)
	st, _ = a.call("GET", deliveries+"?status=dlq", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", one, adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("POST", one+"/retry", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("POST", one+"/retry", adminToken, nil)
	require.Equal(t, 409, st, "queued again: not retryable")
	hb = heartbeat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(10)})
	require.Len(t, hb.Webhooks, 1)
	heartbeat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: queued.DeliveryID, Error: "no", Retryable: false}}})
	st, b = a.call("DELETE", deliveries+"/dlq", adminToken, nil)
	require.Equal(t, 200, st)
	require.JSONEq(t, `{"purged":1}`, string(b))
	st, _ = a.call("GET", deliveries+"/github:none:1", adminToken, nil)
	require.Equal(t, 404, st)

	st, _ = a.call("GET", "/api/hosts/"+hostID+"/rejections?limit=10", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("GET", "/api/quarantine", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("POST", "/api/quarantine/release", adminToken, nil)
	require.Equal(t, 200, st)

	st, _ = a.call("POST", "/api/hosts/"+hostID+"/claim-code", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = a.call("POST", "/api/hosts/"+hostID+"/deactivate", adminToken, nil)
	require.Equal(t, 200, st)
	st, _ = intake(signGitHub(secret, "push", "openapi-3", push.body), hostID)
	require.Equal(t, 410, st)

	var missed []string
	for _, op := range doc.Operations() {
		if !a.ok[op.String()] {
			missed = append(missed, op.String())
		}
	}
	sort.Strings(missed)
	require.Empty(t, missed, "documented operations this test never saw answer 2xx: add a call for each:\n%s", strings.Join(missed, "\n"))
}
