package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

const (
	testAdmin  = "admin-token-for-tests"
	testSecret = "gh-secret"
)

var jwtKey = []byte("jwt-key-for-tests-32-bytes-long!")

type bundle struct {
	t       *testing.T
	srv     *httptest.Server
	handler http.Handler
	store   store.Store
	clock   *clockwork.FakeClock
	server  *Server
	// tracked: the server closes the channel stored in served under the
	// request's servedHeader once its handler returned (serve's does).
	tracked bool
	served  sync.Map
	nextReq atomic.Int64
}

// testServer is a Server over st on clock with the tests' key ring and JWT
// key; a nil log discards.
func testServer(tb testing.TB, st store.Store, clock clockwork.Clock, log *slog.Logger, cfg Config) *Server {
	tb.Helper()
	ring, err := secrets.NewRing(bytes.Repeat([]byte{7}, 32))
	require.NoError(tb, err)
	tokens, err := auth.NewTokens(jwtKey, 0, clock)
	require.NoError(tb, err)
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return New(st, ring, tokens, clock, log, cfg)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupOn(t, sqlitetest.Open(t))
}

// setupOn is setup on the store st.
func setupOn(t *testing.T, st store.Store) *bundle {
	t.Helper()
	clock := newClock()
	s := testServer(t, st, clock, nil, Config{AdminToken: testAdmin, LeaseFor: time.Minute})
	h := s.Handler()
	b := &bundle{t: t, handler: h, store: st, clock: clock, server: s}
	b.srv = b.serve(h)
	t.Cleanup(b.srv.Close)
	return b
}

// serve serves h to the bundle's requests, each of which returns once its
// handler is done (see track).
func (b *bundle) serve(h http.Handler) *httptest.Server {
	b.tracked = true
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if ch, ok := b.served.LoadAndDelete(r.Header.Get(servedHeader)); ok {
			close(ch.(chan struct{}))
		}
	}))
}

// track names req so that the returned function waits until its handler
// is done, on a server of serve's (elsewhere it returns at once).
func (b *bundle) track(req *http.Request) (wait func()) {
	if !b.tracked {
		return func() {}
	}
	id := strconv.FormatInt(b.nextReq.Add(1), 10)
	done := make(chan struct{})
	b.served.Store(id, done)
	req.Header.Set(servedHeader, id)
	return func() { <-done }
}

// servedHeader names a test request, so that do returns once its handler
// is done, not only its answer read: a heartbeat's answer reaches the
// client before the handler records how the hand-out ended.
const servedHeader = "X-Test-Request"

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(a.body, v), string(a.body))
}

// errCode asserts the common error shape and returns its code.
func (a answer) errCode(t *testing.T) string {
	t.Helper()
	var e shared.ErrorResponse
	a.json(t, &e)
	require.NotEmpty(t, e.Error.Code, string(a.body))
	require.NotEmpty(t, e.Error.Message, string(a.body))
	return e.Error.Code
}

func (b *bundle) do(method, path string, body io.Reader, headers map[string]string) answer {
	b.t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(b.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	served := b.track(req)
	resp, err := b.srv.Client().Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	served()
	return answer{status: resp.StatusCode, header: resp.Header, body: rb}
}

func (b *bundle) admin(method, path string, in any) answer {
	b.t.Helper()
	var body io.Reader
	if in != nil {
		j, _ := json.Marshal(in)
		body = bytes.NewReader(j)
	}
	return b.do(method, path, body, map[string]string{"Authorization": "Bearer " + testAdmin, "Content-Type": "application/json"})
}

// newHost creates and claims a host with a github source; it returns the
// host id and a valid token.
// unguarded is the options of a GitHub source without the replay guard.
var unguarded = map[string]string{verify.ReplayGuardOption: "off"}

func (b *bundle) newHost(name string) (string, string) {
	b.t.Helper()
	var h shared.CreateHostResponse
	a := b.admin("POST", "/api/hosts", map[string]string{"name": name})
	require.Equal(b.t, 201, a.status, string(a.body))
	a.json(b.t, &h)
	// Tests send one body (prBody) under many delivery ids: the replay
	// guard, tested on its own (replayguard_test.go), is off here.
	a = b.admin("PUT", "/api/hosts/"+h.ID+"/sources/github", map[string]any{"secrets": []string{testSecret},
		"options": unguarded})
	require.Equal(b.t, 201, a.status, string(a.body))
	var c shared.ClaimResponse
	a = b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: h.ClaimCode}), nil)
	require.Equal(b.t, 200, a.status, string(a.body))
	a.json(b.t, &c)
	return h.ID, c.Token
}

func jsonBody(v any) io.Reader {
	j, _ := json.Marshal(v)
	return bytes.NewReader(j)
}

func ghHeaders(secret, delivery string, body []byte) map[string]string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return map[string]string{
		"Content-Type":        "application/json",
		"X-GitHub-Event":      "pull_request",
		"X-GitHub-Delivery":   delivery,
		"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil)),
	}
}

func (b *bundle) sendGitHub(hostID, delivery string, body []byte) answer {
	return b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(body), ghHeaders(testSecret, delivery, body))
}

// sent sends prBody to hostID as each GitHub delivery in turn: each is
// accepted.
func (b *bundle) sent(hostID string, deliveries ...string) {
	b.t.Helper()
	for _, d := range deliveries {
		require.Equal(b.t, 200, b.sendGitHub(hostID, d, prBody).status, d)
	}
}

func (b *bundle) heartbeat(token string, req any) answer {
	return b.do("POST", "/api/hosts/heartbeat", jsonBody(req), map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"})
}

func (b *bundle) count(hostID string) int {
	b.t.Helper()
	counts, err := b.store.DeliveryCountByStatus(context.Background(), hostID)
	require.NoError(b.t, err)
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

var prBody = []byte("{\"action\":\"opened\",\"number\":7,\"title\":\"caf\u00e9 \U0001F680\"}\n")

func TestIntakeStoresByteExact(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	a := b.sendGitHub(hostID, "d-1", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	require.Equal(t, "queued", r.Status)
	require.Equal(t, "github:d-1:"+strconv.FormatInt(b.clock.Now().UnixMilli(), 10), r.DeliveryID)

	d, err := b.store.DeliveryGet(context.Background(), hostID, r.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, prBody, d.RawBody)
	require.Equal(t, "pull_request", d.EventType)
	require.Equal(t, "opened", d.EventAction)
	require.Equal(t, "d-1", d.EventID)
	require.Equal(t, ghHeaders(testSecret, "d-1", prBody)["X-Hub-Signature-256"], d.Headers["x-hub-signature-256"])
	require.NotContains(t, d.Headers, "content-length")
	require.Equal(t, store.StatusQueued, d.Status)

	// The same event again is a duplicate with the first id, and not stored twice.
	b.clock.Advance(time.Second)
	a = b.sendGitHub(hostID, "d-1", prBody)
	require.Equal(t, 200, a.status)
	var r2 shared.IntakeResponse
	a.json(t, &r2)
	require.Equal(t, shared.IntakeResponse{DeliveryID: r.DeliveryID, Status: "duplicate"}, r2)
	require.Equal(t, 1, b.count(hostID))
}

func TestIntakeRejectsBadInput(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	otherID, _ := b.newHost("other")
	require.Equal(t, 201, b.admin("PUT", "/api/hosts/"+hostID+"/sources/small", map[string]any{
		"provider": "generic", "secrets": []string{"k"}, "max_body_bytes": 1024}).status)
	require.Equal(t, 201, b.admin("PUT", "/api/hosts/"+hostID+"/sources/off", map[string]any{
		"provider": "generic", "secrets": []string{"k"}, "enabled": false}).status)
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+otherID+"/deactivate", nil).status)

	tampered := ghHeaders(testSecret, "x", prBody)
	wrongSecret := ghHeaders("not the secret", "x", prBody)
	noSig := ghHeaders(testSecret, "x", prBody)
	delete(noSig, "X-Hub-Signature-256")
	malformed := ghHeaders(testSecret, "x", prBody)
	malformed["X-Hub-Signature-256"] = "md5=abc"

	cases := []struct {
		name   string
		path   string
		body   []byte
		hdr    map[string]string
		status int
		code   string
	}{
		{"tampered body", "/api/webhooks/" + hostID + "/github", append([]byte("x"), prBody...), tampered, 401, "unauthorized"},
		{"wrong secret", "/api/webhooks/" + hostID + "/github", prBody, wrongSecret, 401, "unauthorized"},
		{"missing signature", "/api/webhooks/" + hostID + "/github", prBody, noSig, 401, "unauthorized"},
		{"malformed signature", "/api/webhooks/" + hostID + "/github", prBody, malformed, 401, "unauthorized"},
		{"unknown host", "/api/webhooks/h_nope/github", prBody, tampered, 404, "not_found"},
		{"deactivated host", "/api/webhooks/" + otherID + "/github", prBody, ghHeaders(testSecret, "x", prBody), 410, "gone"},
		{"unknown source", "/api/webhooks/" + hostID + "/stripe", prBody, tampered, 404, "not_found"},
		{"disabled source", "/api/webhooks/" + hostID + "/off", prBody, tampered, 404, "not_found"},
		{"over the limit", "/api/webhooks/" + hostID + "/small", bytes.Repeat([]byte("a"), 2048), nil, 413, "too_large"},
		{"GET not allowed", "/api/webhooks/" + hostID + "/github", nil, nil, 405, "method_not_allowed"},
	}
	for _, c := range cases {
		method := "POST"
		if c.status == 405 {
			method = "GET"
		}
		a := b.do(method, c.path, bytes.NewReader(c.body), c.hdr)
		require.Equal(t, c.status, a.status, "%s: %s", c.name, a.body)
		require.Equal(t, c.code, a.errCode(t), c.name)
	}
	require.Equal(t, 0, b.count(hostID), "nothing stored")
	require.Equal(t, 0, b.count(otherID), "nothing stored")
}

// endless is a body that never ends, counting what was read of it (by the
// client transport's goroutine).
type endless struct{ n atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.n.Add(int64(len(p)))
	return len(p), nil
}

func TestIntakeDoesNotReadPastLimit(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	require.Equal(t, 201, b.admin("PUT", "/api/hosts/"+hostID+"/sources/small", map[string]any{
		"provider": "generic", "secrets": []string{"k"}, "max_body_bytes": 4096}).status)

	// Streamed (chunked, no Content-Length) body that would never end.
	body := &endless{}
	req, _ := http.NewRequest("POST", b.srv.URL+"/api/webhooks/"+hostID+"/small", body)
	req.ContentLength = -1
	resp, err := b.srv.Client().Do(req)
	if err == nil {
		defer resp.Body.Close()
		require.Equal(t, 413, resp.StatusCode)
	}
	// Either way the server stopped reading: the client was not made to send
	// an unbounded body (allow for socket buffers).
	require.Less(t, body.n.Load(), int64(16<<20))
	// Whatever the transport returned, the server answered 413.
	var rej rejectionsResponse
	b.admin("GET", "/api/hosts/"+hostID+"/rejections", nil).json(t, &rej)
	require.Len(t, rej.Rejections, 1)
	require.Equal(t, 413, rej.Rejections[0].Status)

	// A declared Content-Length over the limit is refused before reading.
	a := b.do("POST", "/api/webhooks/"+hostID+"/small", bytes.NewReader(make([]byte, 5000)), nil)
	require.Equal(t, 413, a.status)
	require.Equal(t, 0, b.count(hostID))
}

func TestIntakeFilteredAndGeneric(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	require.Equal(t, 200, b.admin("PUT", "/api/hosts/"+hostID+"/sources/github", map[string]any{"events": []string{"push", "issues.opened"}}).status,
		"secrets kept when omitted")
	a := b.sendGitHub(hostID, "d-1", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	require.Equal(t, shared.IntakeResponse{Status: "filtered"}, r)
	require.Equal(t, 0, b.count(hostID))

	require.Equal(t, 201, b.admin("PUT", "/api/hosts/"+hostID+"/sources/billing", map[string]any{"provider": "generic", "secrets": []string{"k"}}).status)
	body := []byte(`{"type":"invoice.paid"}`)
	m := hmac.New(sha256.New, []byte("k"))
	m.Write(body)
	a = b.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), map[string]string{"X-Signature": "sha256=" + hex.EncodeToString(m.Sum(nil)), "X-Event-Id": "evt_1"})
	require.Equal(t, 202, a.status, string(a.body))
	a.json(t, &r)
	require.Equal(t, "queued", r.Status)
	require.True(t, strings.HasPrefix(r.DeliveryID, "billing:evt_1:"))
}

func TestIntakeStoreDownIs503(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	require.NoError(t, b.store.Close())
	a := b.sendGitHub(hostID, "d-1", prBody)
	require.Equal(t, 503, a.status, string(a.body))
	require.Equal(t, "unavailable", a.errCode(t))
	a = b.do("GET", "/readyz", nil, nil)
	require.Equal(t, 503, a.status)
}

func TestHeartbeatLeasesAcksAndGzips(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, 200, b.sendGitHub(hostID, id, prBody).status)
		b.clock.Advance(time.Millisecond)
	}
	var none shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0)}).json(t, &none)
	require.Empty(t, none.Webhooks, "max_webhooks 0 leases nothing")
	require.False(t, none.More)

	a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(2)}),
		map[string]string{"Authorization": "Bearer " + token, "Accept-Encoding": "gzip"})
	require.Equal(t, 200, a.status)
	require.Equal(t, "gzip", a.header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(bytes.NewReader(a.body))
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	var hb shared.HeartbeatResponse
	require.NoError(t, json.Unmarshal(plain, &hb))
	require.Equal(t, "ok", hb.Status)
	require.True(t, hb.More)
	require.Len(t, hb.Webhooks, 2)
	w := hb.Webhooks[0]
	require.True(t, strings.HasPrefix(w.DeliveryID, "github:a:"), "FIFO")
	require.Equal(t, prBody, w.RawBody)
	require.JSONEq(t, string(prBody), string(w.Body))
	require.Equal(t, 1, w.Attempt)
	require.Equal(t, "pull_request", w.EventType)
	require.Equal(t, "opened", w.EventAction)
	require.Equal(t, "a", w.Headers["x-github-delivery"])
	require.NotEmpty(t, w.CorrelationID)

	d, err := b.store.DeliveryGet(context.Background(), hostID, w.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, d.Status)

	a = b.heartbeat(token, shared.HeartbeatRequest{
		WebhookAcks:  []string{hb.Webhooks[0].DeliveryID},
		WebhookNacks: []shared.Nack{{DeliveryID: hb.Webhooks[1].DeliveryID, Error: "boom", Retryable: true}},
		RawBodyOnly:  true,
	})
	require.Equal(t, 200, a.status, string(a.body))
	var raw struct {
		Webhooks []map[string]json.RawMessage `json:"webhooks"`
	}
	a.json(t, &raw)
	require.Len(t, raw.Webhooks, 1)
	require.NotContains(t, raw.Webhooks[0], "body", "raw_body_only: no parsed copy")
	require.Contains(t, raw.Webhooks[0], "raw_body")
	a.json(t, &hb)
	require.Len(t, hb.Webhooks, 1, "the third; the nacked one waits 30 s")
	require.False(t, hb.More)
	require.Equal(t, prBody, hb.Webhooks[0].RawBody)

	d, _ = b.store.DeliveryGet(context.Background(), hostID, hb.Webhooks[0].DeliveryID)
	require.Equal(t, store.StatusDelivered, d.Status)
	counts, _ := b.store.DeliveryCountByStatus(context.Background(), hostID)
	require.Equal(t, 1, counts[store.StatusAcked])
	require.Equal(t, 1, counts[store.StatusRetrying])
}

func TestHeartbeatRejects(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	now := b.clock.Now()
	claims := auth.Claims{Generation: 1, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "relay-cloud", Subject: hostID, Audience: jwt.ClaimStrings{shared.TokenAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
	}}
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, claims).SignedString(jwtKey)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	parts := strings.Split(token, ".")
	tampered := parts[0] + "." + parts[1] + "x." + parts[2]

	for name, tok := range map[string]string{"wrong algorithm": hs512, "alg none": none, "tampered": tampered, "garbage": "abc"} {
		a := b.heartbeat(tok, shared.HeartbeatRequest{})
		require.Equal(t, 401, a.status, name)
		require.Equal(t, "unauthorized", a.errCode(t), name)
	}
	a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{}), nil)
	require.Equal(t, 401, a.status, "missing token")
	require.Equal(t, "unauthorized", a.errCode(t))

	malformed := map[string]string{
		"not json":         `{"webhook_acks": [`,
		"wrong type":       `{"webhook_acks": "abc"}`,
		"negative max":     `{"max_webhooks": -1}`,
		"empty ack":        `{"webhook_acks": [""]}`,
		"nack without id":  `{"webhook_nacks": [{"error": "x"}]}`,
		"empty body":       ``,
		"trailing garbage": `{} {}`,
	}
	for name, body := range malformed {
		a := b.do("POST", "/api/hosts/heartbeat", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + token})
		require.Equal(t, 400, a.status, "%s: %s", name, a.body)
		require.Equal(t, "invalid", a.errCode(t), name)
	}

	// Expired after 15 minutes.
	b.clock.Advance(16 * time.Minute)
	a = b.heartbeat(token, shared.HeartbeatRequest{})
	require.Equal(t, 401, a.status, "expired")
}

func TestDeactivateRevokesTokens(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	require.Equal(t, 200, b.heartbeat(token, shared.HeartbeatRequest{}).status)
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+hostID+"/deactivate", nil).status)
	a := b.heartbeat(token, shared.HeartbeatRequest{})
	require.Equal(t, 401, a.status)
	require.Equal(t, "unauthorized", a.errCode(t))
}

func TestClaimCodeOneTimeAndExpiring(t *testing.T) {
	b := setup(t)
	var h shared.CreateHostResponse
	b.admin("POST", "/api/hosts", map[string]string{"name": "x"}).json(t, &h)
	require.Equal(t, b.clock.Now().Add(24*time.Hour), h.ClaimExpiresAt)

	a := b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: h.ClaimCode, AgentVersion: "t"}), nil)
	require.Equal(t, 200, a.status, string(a.body))
	var c shared.ClaimResponse
	a.json(t, &c)
	require.Equal(t, h.ID, c.HostID)
	require.NotEmpty(t, c.HostCredential)
	require.Positive(t, c.HeartbeatIntervalS)

	a = b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: h.ClaimCode}), nil)
	require.Equal(t, 401, a.status, "used code")
	require.Equal(t, "unauthorized", a.errCode(t))

	// The credential gets fresh tokens; a wrong one does not.
	a = b.do("POST", "/api/hosts/token", jsonBody(shared.TokenRequest{HostID: h.ID, HostCredential: c.HostCredential}), nil)
	require.Equal(t, 200, a.status)
	a = b.do("POST", "/api/hosts/token", jsonBody(shared.TokenRequest{HostID: h.ID, HostCredential: c.HostCredential + "x"}), nil)
	require.Equal(t, 401, a.status)

	// A new code from the claim-code endpoint expires after 24 h.
	var nc shared.CreateHostResponse
	a = b.admin("POST", "/api/hosts/"+h.ID+"/claim-code", nil)
	require.Equal(t, 200, a.status)
	a.json(t, &nc)
	require.NotEqual(t, h.ClaimCode, nc.ClaimCode)
	b.clock.Advance(25 * time.Hour)
	a = b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: nc.ClaimCode}), nil)
	require.Equal(t, 401, a.status, "expired code")
	a = b.do("POST", "/api/hosts/claim", jsonBody(map[string]string{}), nil)
	require.Equal(t, 400, a.status, "no code")
}

// TestHostIsolation proves a host's token can never see, ack, nack or extend
// another host's deliveries.
func TestHostIsolation(t *testing.T) {
	b := setup(t)
	hostA, tokenA := b.newHost("a")
	hostB, tokenB := b.newHost("b")
	b.sent(hostB, "b-1", "b-2", "b-3")

	var hb shared.HeartbeatResponse
	b.heartbeat(tokenA, shared.HeartbeatRequest{}).json(t, &hb)
	require.Empty(t, hb.Webhooks, "A sees none of B's deliveries")

	b.heartbeat(tokenB, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(2)}).json(t, &hb)
	require.Len(t, hb.Webhooks, 2)
	leased := []string{hb.Webhooks[0].DeliveryID, hb.Webhooks[1].DeliveryID}
	before := map[string]*store.Delivery{}
	for _, id := range leased {
		before[id], _ = b.store.DeliveryGet(context.Background(), hostB, id)
	}

	b.clock.Advance(10 * time.Second)
	a := b.heartbeat(tokenA, shared.HeartbeatRequest{
		WebhookAcks:    []string{leased[0]},
		WebhookNacks:   []shared.Nack{{DeliveryID: leased[1], Error: "x", Retryable: false}},
		WebhookExtends: leased,
	})
	require.Equal(t, 200, a.status)
	a.json(t, &hb)
	require.Empty(t, hb.Webhooks)
	for _, id := range leased {
		after, err := b.store.DeliveryGet(context.Background(), hostB, id)
		require.NoError(t, err)
		require.Equal(t, before[id].Status, after.Status, "A's ack/nack changed nothing")
		require.Equal(t, before[id].LeaseExpiresAt, after.LeaseExpiresAt, "A's extend changed nothing")
		require.Empty(t, after.LastError)
	}
	// The admin view is per host too.
	require.Equal(t, 404, b.admin("GET", "/api/hosts/"+hostA+"/webhooks/"+leased[0], nil).status)
}

// deadConn is the connection of a host that went away: nothing written
// reaches it.
type deadConn struct{ header http.Header }

func (d *deadConn) Header() http.Header { return d.header }
func (d *deadConn) WriteHeader(int)     {}
func (d *deadConn) Write([]byte) (int, error) {
	return 0, errors.New("write tcp: connection reset by peer")
}

// A heartbeat whose answer cannot be written handed nothing out: the
// attempt fails and is due again at once, not after the lease and a delay.
func TestHeartbeatAnswerNotWrittenReleases(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("a")
	var queued shared.IntakeResponse
	a := b.sendGitHub(hostID, "lost-1", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &queued)

	for attempt, gzip := range []bool{true, false} {
		req := httptest.NewRequest("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{}))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if gzip {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		b.handler.ServeHTTP(&deadConn{header: http.Header{}}, req)

		d, err := b.store.DeliveryGet(context.Background(), hostID, queued.DeliveryID)
		require.NoError(t, err)
		require.Equal(t, store.StatusRetrying, d.Status, "gzip %v", gzip)
		require.Equal(t, attempt+1, d.Attempts)
		require.Equal(t, b.clock.Now(), *d.NextRetryAt, "due at once")
		require.Nil(t, d.LeaseExpiresAt)
		trail, err := b.store.DeliveryEventList(context.Background(), d.ID)
		require.NoError(t, err)
		require.Equal(t, store.TransitionRelease.Reason, trail[len(trail)-1].Reason)
	}

	// The next heartbeat that reaches the host has it, with no clock moved.
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, queued.DeliveryID, hb.Webhooks[0].DeliveryID)
	require.Equal(t, 3, hb.Webhooks[0].Attempt)
}

// A host that lost a heartbeat's answer says so, with what it holds: what
// the lost answer leased comes again at once, as the next attempt.
func TestHeartbeatAnswerLost(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("a")
	for _, id := range []string{"lost-1", "lost-2", "lost-3"} {
		require.Equal(t, 200, b.sendGitHub(hostID, id, prBody).status)
	}
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(2)}).json(t, &hb)
	require.Len(t, hb.Webhooks, 2)
	held, done := hb.Webhooks[0].DeliveryID, hb.Webhooks[1].DeliveryID
	// This answer never reaches the host.
	b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(1)}).json(t, &hb)
	require.Len(t, hb.Webhooks, 1)
	lost := hb.Webhooks[0].DeliveryID

	// One still running (held), one finished and acked here, one lost.
	a := b.heartbeat(token, shared.HeartbeatRequest{AnswerLost: true, WebhooksHeld: []string{held}, WebhookAcks: []string{done}})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &hb)
	require.Len(t, hb.Webhooks, 1, "the held one stays leased; the lost one comes again, no clock moved")
	require.Equal(t, lost, hb.Webhooks[0].DeliveryID)
	require.Equal(t, 2, hb.Webhooks[0].Attempt)
	for id, want := range map[string]store.Status{held: store.StatusDelivered, done: store.StatusAcked} {
		d, err := b.store.DeliveryGet(context.Background(), hostID, id)
		require.NoError(t, err)
		require.Equal(t, want, d.Status, id)
		require.Equal(t, 1, d.Attempts, id)
	}

	a = b.heartbeat(token, shared.HeartbeatRequest{WebhooksHeld: []string{held}})
	require.Equal(t, 400, a.status)
	require.Contains(t, string(a.body), "webhooks_held is only sent with answer_lost")
}

// One event fanned out to two hosts under the same source name in the same
// millisecond (the clock does not move): each host gets its own delivery.
func TestSameEventToTwoHosts(t *testing.T) {
	b := setup(t)
	hostA, tokenA := b.newHost("a")
	hostB, tokenB := b.newHost("b")
	var first, second shared.IntakeResponse
	a := b.sendGitHub(hostA, "fan-1", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &first)
	a = b.sendGitHub(hostB, "fan-1", prBody)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &second)
	require.Equal(t, shared.IntakeQueued, second.Status)
	require.NotEqual(t, first.DeliveryID, second.DeliveryID)

	for _, h := range []struct{ token, id string }{{tokenA, first.DeliveryID}, {tokenB, second.DeliveryID}} {
		var hb shared.HeartbeatResponse
		b.heartbeat(h.token, shared.HeartbeatRequest{}).json(t, &hb)
		require.Len(t, hb.Webhooks, 1)
		require.Equal(t, h.id, hb.Webhooks[0].DeliveryID)
		require.Equal(t, prBody, hb.Webhooks[0].RawBody)
	}
}

func TestAdminAPI(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	b.sent(hostID, "d-1")
	b.clock.Advance(time.Millisecond)
	b.sent(hostID, "d-2")

	// Authorization.
	a := b.do("GET", "/api/hosts", nil, nil)
	require.Equal(t, 401, a.status)
	require.Equal(t, "unauthorized", a.errCode(t))
	a = b.do("GET", "/api/hosts", nil, map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, 401, a.status)

	// Hosts.
	var hosts struct {
		Hosts []hostJSON `json:"hosts"`
	}
	b.admin("GET", "/api/hosts", nil).json(t, &hosts)
	require.Len(t, hosts.Hosts, 1)
	require.Equal(t, 2, hosts.Hosts[0].Counts[store.StatusQueued])
	require.True(t, hosts.Hosts[0].Claimed)
	require.Equal(t, b.srv.URL+"/api/webhooks/"+hostID+"/{source}", hosts.Hosts[0].WebhookURL)
	require.Equal(t, 404, b.admin("GET", "/api/hosts/h_nope", nil).status)
	require.Equal(t, 400, b.admin("POST", "/api/hosts", map[string]string{"name": ""}).status)
	// curl -d sends a form content type; the body is still read as JSON.
	a = b.do("POST", "/api/hosts", strings.NewReader(`{"name":"from curl"}`), map[string]string{
		"Authorization": "Bearer " + testAdmin, "Content-Type": "application/x-www-form-urlencoded"})
	require.Equal(t, 201, a.status, string(a.body))
	a = b.do("POST", "/api/hosts", strings.NewReader(`name=x`), map[string]string{"Authorization": "Bearer " + testAdmin})
	require.Equal(t, 400, a.status)
	require.Equal(t, "invalid", a.errCode(t))

	// Sources: secrets are write-only.
	a = b.admin("GET", "/api/hosts/"+hostID+"/sources/github", nil)
	require.Equal(t, 200, a.status)
	require.NotContains(t, string(a.body), testSecret)
	var src shared.Source
	a.json(t, &src)
	require.Equal(t, []string{secrets.Fingerprint(b.server.fingerprintKey(), []byte(testSecret))}, src.SecretFingerprints)
	require.Equal(t, int64(25<<20), src.MaxBodyBytes)
	a = b.admin("GET", "/api/hosts/"+hostID+"/sources", nil)
	require.NotContains(t, string(a.body), testSecret)
	stored, _ := b.store.SourceGet(context.Background(), hostID, "github")
	require.NotContains(t, stored.Secrets[0].Ciphertext, testSecret, "encrypted at rest")
	require.Equal(t, 400, b.admin("PUT", "/api/hosts/"+hostID+"/sources/x", map[string]any{"secrets": []string{"k"}}).status, "unknown provider")
	require.Equal(t, 400, b.admin("PUT", "/api/hosts/"+hostID+"/sources/Bad!", map[string]any{"provider": "generic", "secrets": []string{"k"}}).status)
	require.Equal(t, 400, b.admin("PUT", "/api/hosts/"+hostID+"/sources/new", map[string]any{"provider": "generic"}).status, "no secret")
	require.Equal(t, 404, b.admin("PUT", "/api/hosts/h_nope/sources/github", map[string]any{"secrets": []string{"k"}}).status)
	require.Equal(t, 404, b.admin("GET", "/api/hosts/"+hostID+"/sources/none", nil).status)

	// Deliveries: list, filters, cursor, one with its trail.
	var page struct {
		Webhooks   []shared.Delivery `json:"webhooks"`
		NextCursor string            `json:"next_cursor"`
	}
	b.admin("GET", "/api/hosts/"+hostID+"/webhooks?limit=1", nil).json(t, &page)
	require.Len(t, page.Webhooks, 1)
	require.True(t, strings.HasPrefix(page.Webhooks[0].DeliveryID, "github:d-2:"), "newest first")
	require.Nil(t, page.Webhooks[0].RawBody)
	require.NotEmpty(t, page.NextCursor)
	first := page.Webhooks[0].DeliveryID
	b.admin("GET", "/api/hosts/"+hostID+"/webhooks?limit=1&cursor="+page.NextCursor, nil).json(t, &page)
	require.Len(t, page.Webhooks, 1)
	require.NotEqual(t, first, page.Webhooks[0].DeliveryID)
	b.admin("GET", "/api/hosts/"+hostID+"/webhooks?status=acked", nil).json(t, &page)
	require.Empty(t, page.Webhooks)
	require.Empty(t, page.NextCursor)

	for _, q := range []string{"status=bogus", "cursor=!!!", "limit=0", "limit=abc", "limit=501"} {
		a := b.admin("GET", "/api/hosts/"+hostID+"/webhooks?"+q, nil)
		require.Equal(t, 400, a.status, q)
		require.Equal(t, "invalid", a.errCode(t), q)
	}
	require.Equal(t, 404, b.admin("GET", "/api/hosts/h_nope/webhooks", nil).status)

	var one struct {
		Delivery shared.Delivery `json:"delivery"`
		Events   []eventJSON     `json:"events"`
	}
	a = b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+first, nil)
	require.Equal(t, 200, a.status)
	a.json(t, &one)
	require.Equal(t, prBody, one.Delivery.RawBody)
	require.NotEmpty(t, one.Events)
	require.Equal(t, store.StatusQueued, one.Events[0].To)
	require.Equal(t, 404, b.admin("GET", "/api/hosts/"+hostID+"/webhooks/github:nope:1", nil).status)
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	b := setup(t)
	s := New(b.store, nil, nil, b.clock, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/api/hosts", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 501, resp.StatusCode)
}

func TestUnknownRoute(t *testing.T) {
	b := setup(t)
	a := b.do("GET", "/nope", nil, nil)
	require.Equal(t, 404, a.status)
	require.Equal(t, "not_found", a.errCode(t))
}

// TestErrorMapping: store errors become their HTTP answers in one place, and
// internal detail never reaches the client.
func TestErrorMapping(t *testing.T) {
	s := New(nil, nil, nil, clockwork.NewFakeClock(), slog.New(slog.NewTextHandler(io.Discard, nil)), Config{})
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("host get: %w", store.ErrNotFound), 404, shared.CodeNotFound},
		{fmt.Errorf("delivery insert: %w", store.ErrConflict), 409, shared.CodeConflict},
		{shared.Unavailable(errors.New("dial tcp: refused")), 503, shared.CodeUnavailable},
		{errors.New("secret detail"), 500, shared.CodeInternal},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		ctx, _ := gin.CreateTestContext(w)
		ctx.Request = httptest.NewRequest("GET", "/x", nil)
		s.writeError(ctx, c.err)
		require.Equal(t, c.status, w.Code, c.err.Error())
		var e shared.ErrorResponse
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e))
		require.Equal(t, c.code, e.Error.Code)
		require.NotContains(t, w.Body.String(), "detail")
		require.NotContains(t, w.Body.String(), "refused")
	}
}

// TestAnswersSayTheCloudsTime: the token and heartbeat answers carry the
// cloud's now, and the heartbeat's the lease length, so a host whose clock
// is off reads a token's lifetime and times its extends on the cloud's
// terms.
func TestAnswersSayTheCloudsTime(t *testing.T) {
	b := setup(t)
	var h shared.CreateHostResponse
	b.admin("POST", "/api/hosts", map[string]string{"name": "x"}).json(t, &h)
	var c shared.ClaimResponse
	b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: h.ClaimCode}), nil).json(t, &c)

	b.clock.Advance(time.Minute)
	var hb shared.HeartbeatResponse
	b.heartbeat(c.Token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Equal(t, b.clock.Now(), hb.Now)
	require.Equal(t, 60, hb.LeaseS, "the bundle's cloud leases for a minute")

	b.clock.Advance(time.Minute)
	var tr shared.TokenResponse
	a := b.do("POST", "/api/hosts/token", jsonBody(shared.TokenRequest{HostID: h.ID, HostCredential: c.HostCredential}), nil)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &tr)
	require.Equal(t, b.clock.Now(), tr.Now)
	require.Equal(t, 15*time.Minute, tr.TokenExpiresAt.Sub(tr.Now))
}
