package agent

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// fakeCloud plays the cloud's token and heartbeat endpoints: a true process
// edge of the host.
type fakeCloud struct {
	t     *testing.T
	clock *clockwork.FakeClock

	mu            sync.Mutex
	tokenLifetime time.Duration
	tokenStatus   int // non-zero: the token endpoint answers this
	tokensIssued  int
	validToken    string
	// answer returns the status and answer of heartbeat number n (1-based).
	answer func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse)
	n      int
	// hold, if set, returns a channel the answer of heartbeat n waits for
	// (nil: none), as a cloud holds a long poll; other heartbeats are
	// served meanwhile.
	hold func(n int, req shared.HeartbeatRequest) <-chan struct{}
	// raw, if set, returns the bytes heartbeat n is answered with as a
	// binary answer, instead of answer's (nil: answer's).
	raw func(n int) []byte
	// binaryAnswers counts heartbeats answered in the binary layout.
	binaryAnswers int

	requests chan heartbeatSeen
}

type heartbeatSeen struct {
	n             int
	req           shared.HeartbeatRequest
	authorization string
	status        int
	at            time.Time // on the agent's clock, when the cloud answered
}

func newFakeCloud(t *testing.T, clock *clockwork.FakeClock) *fakeCloud {
	return &fakeCloud{
		t:             t,
		clock:         clock,
		tokenLifetime: 15 * time.Minute,
		answer: func(int, shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			return http.StatusOK, shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
		},
		requests: make(chan heartbeatSeen, 100),
	}
}

func (fc *fakeCloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fc.mu.Lock()
	locked := true
	defer func() {
		if locked {
			fc.mu.Unlock()
		}
	}()
	switch r.URL.Path {
	case shared.PathToken:
		var req shared.TokenRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.HostID != "h1" || req.HostCredential != "cred" {
			fc.t.Errorf("bad token request: %+v %v", req, err)
		}
		if fc.tokenStatus != 0 {
			writeJSON(w, r, fc.tokenStatus, shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeGone, Message: "host deactivated"}})
			return
		}
		fc.tokensIssued++
		fc.validToken = fmt.Sprintf("tok-%d", fc.tokensIssued)
		writeJSON(w, r, http.StatusOK, shared.TokenResponse{Token: fc.validToken, TokenExpiresAt: fc.clock.Now().Add(fc.tokenLifetime)})
	case shared.PathHeartbeat:
		if r.Header.Get("Accept-Encoding") != "gzip" {
			fc.t.Errorf("heartbeat without Accept-Encoding: gzip")
		}
		var req shared.HeartbeatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fc.t.Errorf("decode heartbeat: %v", err)
		}
		fc.n++
		auth := r.Header.Get("Authorization")
		status, resp := http.StatusUnauthorized, shared.HeartbeatResponse{}
		if auth == "Bearer "+fc.validToken {
			status, resp = fc.answer(fc.n, req)
		}
		if status == http.StatusUnauthorized {
			fc.validToken = "" // the cloud forgot this token
		}
		// Asked for, the answer is binary, as the cloud's.
		var raw []byte
		if fc.raw != nil && status == http.StatusOK {
			raw = fc.raw(fc.n)
		}
		if raw == nil && status == http.StatusOK && strings.HasPrefix(r.Header.Get("Accept"), shared.MediaTypeWebhooksBinary) {
			var err error
			if raw, err = shared.AppendHeartbeatAnswer(nil, &resp); err != nil {
				fc.t.Errorf("encode answer: %v", err)
			}
		}
		if raw != nil {
			fc.binaryAnswers++
		}
		fc.requests <- heartbeatSeen{n: fc.n, req: req, authorization: auth, status: status, at: fc.clock.Now()}
		if fc.hold != nil {
			if held := fc.hold(fc.n, req); held != nil {
				fc.mu.Unlock()
				locked = false
				<-held
			}
		}
		if status != http.StatusOK {
			writeJSON(w, r, status, shared.ErrorResponse{Error: shared.ErrorDetail{Code: "x", Message: http.StatusText(status)}})
			return
		}
		if raw != nil {
			w.Header().Set("Content-Type", shared.MediaTypeWebhooksBinary)
			w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
			w.Write(raw)
			return
		}
		writeJSON(w, r, status, resp)
	default:
		http.NotFound(w, r)
	}
}

// writeJSON answers gzip-compressed when the client asks for it.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(status)
		gz := gzip.NewWriter(w)
		json.NewEncoder(gz).Encode(v)
		gz.Close()
		return
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type fakeHandler struct {
	calls atomic.Int32
	fn    func(ctx context.Context, w shared.Webhook) handler.Outcome
	jobs  chan handler.Job // every job, if set
}

func (h *fakeHandler) Name() string { return "fake" }

func (h *fakeHandler) Handle(ctx context.Context, job handler.Job) handler.Outcome {
	h.calls.Add(1)
	if h.jobs != nil {
		h.jobs <- job
	}
	if h.fn == nil {
		return handler.Outcome{OK: true, ResponseStatus: 200, Output: "done"}
	}
	return h.fn(ctx, job.Webhook)
}

type testBundle struct {
	agent      *Agent
	ledger     *ledger.Ledger
	ledgerPath string
	cloud      *fakeCloud
	clock      *clockwork.FakeClock
	handler    *fakeHandler
	cancel     context.CancelFunc
	done       chan error
	sources    map[string]Source // set in prepare to override the default sources
	opts       func(*Options)    // set in prepare to adjust the options
	// inMemory, set in prepare, serves the fake cloud over an in-memory
	// network (serve) rather than a loopback port: what a test in a
	// synctest bubble needs.
	inMemory bool
}

// serve serves h for the test and returns its URL and a client of it: an
// httptest server, or with inMemory an HTTP server on an in-memory
// network (pipeListener), whose connections block as synctest counts
// durably blocked.
func (b *testBundle) serve(t *testing.T, h http.Handler) (string, *http.Client) {
	if !b.inMemory {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL, srv.Client()
	}
	l := newPipeListener()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.DialContext}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-served
	})
	return "http://in-memory", &http.Client{Transport: tr}
}

// pipeListener is an in-memory network: each connection DialContext makes
// is a net.Pipe, whose other end Accept returns.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-memory" }

func setup(t *testing.T, prepare func(*testBundle)) *testBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	cloud := newFakeCloud(t, clock)
	b := &testBundle{ledger: l, ledgerPath: path, cloud: cloud, clock: clock, handler: &fakeHandler{}, done: make(chan error, 1)}
	if prepare != nil {
		prepare(b)
	}
	url, client := b.serve(t, cloud)
	if b.sources == nil {
		b.sources = map[string]Source{
			"github": {Enabled: true, Events: []string{"pull_request", "push"}, Routes: []Route{{Handler: b.handler}}},
			"slack":  {Enabled: false},
		}
	}
	opts := Options{
		Cloud:      cloudapi.New(url, client, "test"),
		HostID:     "h1",
		Credential: "cred",
		Ledger:     l,
		Sources:    b.sources,
		Subscription: &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{
			"github": {Enabled: true, Events: []string{"pull_request", "push"}},
		}},
		Interval: 30 * time.Second,
		Workers:  2,
		Clock:    clock,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if b.opts != nil {
		b.opts(&opts)
	}
	b.agent = New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.done <- b.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func webhook(id, eventType string) shared.Webhook {
	return shared.Webhook{
		DeliveryID: id, Source: "github", EventType: eventType, EventAction: "opened",
		Headers:       map[string]string{"x-github-event": eventType},
		Body:          json.RawMessage(`{"repository":{"full_name":"acme/app"},"number":7}`),
		RawBody:       []byte(`{"repository":{"full_name":"acme/app"},"number":7}`),
		Attempt:       1,
		CorrelationID: "corr-" + id,
	}
}

// serve answers the first heartbeat with ws and the later ones with nothing.
func serve(ws ...shared.Webhook) func(int, shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
	return func(n int, _ shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
		resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
		if n == 1 {
			resp.Webhooks = ws
		}
		return http.StatusOK, resp
	}
}

// next returns the next heartbeat the cloud saw.
func (b *testBundle) next(t *testing.T) heartbeatSeen {
	t.Helper()
	select {
	case hb := <-b.cloud.requests:
		return hb
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat")
		return heartbeatSeen{}
	}
}

// nextWhere skips heartbeats until one matches.
func (b *testBundle) nextWhere(t *testing.T, match func(heartbeatSeen) bool) heartbeatSeen {
	t.Helper()
	for {
		if hb := b.next(t); match(hb) {
			return hb
		}
	}
}

// advance moves the clock once the agent waits on a timer.
func (b *testBundle) advance(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1), "agent never waited on its clock")
	b.clock.Advance(d)
}

// stopped waits for Run to return nil, and leaves its result for the
// cleanup.
func (b *testBundle) stopped(t *testing.T) {
	t.Helper()
	select {
	case err := <-b.done:
		require.NoError(t, err)
		b.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
}

func (b *testBundle) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, what)
}

func (b *testBundle) result(t *testing.T, id string) ledger.Result {
	e, err := b.ledger.DeliveryGet(context.Background(), id)
	if err != nil {
		return ""
	}
	return e.Result
}

func (b *testBundle) outbox(t *testing.T) int {
	n, err := b.ledger.OutboxCount(context.Background())
	require.NoError(t, err)
	return n
}

// blocked is a handler that says when it starts and succeeds once released.
type blocked struct{ started, release chan struct{} }

func newBlocked() *blocked {
	return &blocked{started: make(chan struct{}), release: make(chan struct{})}
}

func (h *blocked) run(context.Context, shared.Webhook) handler.Outcome {
	close(h.started)
	<-h.release
	return handler.Outcome{OK: true, ResponseStatus: 200}
}

// failFirst is a cloud's answer that fails the first heartbeat with status
// and answers the others.
func failFirst(status int) func(int, shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
	return func(n int, _ shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
		if n == 1 {
			return status, shared.HeartbeatResponse{}
		}
		return http.StatusOK, shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
	}
}

// setupFailingFirst sets up an agent whose cloud fails the first heartbeat
// with status (failFirst), and returns it with that heartbeat.
func setupFailingFirst(t *testing.T, status int) (*testBundle, heartbeatSeen) {
	t.Helper()
	b := setup(t, func(b *testBundle) { b.cloud.answer = failFirst(status) })
	hb := b.next(t)
	require.Equal(t, status, hb.status)
	return b, hb
}
