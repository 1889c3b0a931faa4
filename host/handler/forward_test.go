package handler

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

func testWebhook(body string) shared.Webhook {
	return shared.Webhook{
		DeliveryID: "github:abc123:1707912345000",
		Source:     "github",
		EventType:  "pull_request",
		Headers: map[string]string{
			"x-github-event":      "pull_request",
			"x-github-delivery":   "abc123",
			"x-hub-signature-256": "sha256=deadbeef",
			"content-type":        "application/json",
			"user-agent":          "GitHub-Hookshot/1",
			"connection":          "keep-alive, X-Hop",
			"x-hop":               "drop me",
			"transfer-encoding":   "chunked",
			"content-length":      "999",
			"host":                "relay.example.com",
			"keep-alive":          "timeout=5",
		},
		RawBody:       []byte(body),
		Attempt:       3,
		CorrelationID: "corr-1",
	}
}

func newForward(t *testing.T, url string, mod func(*ForwardOptions)) *Forward {
	t.Helper()
	opts := ForwardOptions{URL: url, ConnectTimeout: time.Second, Timeout: 5 * time.Second, Retry4xx: true}
	if mod != nil {
		mod(&opts)
	}
	f, err := NewForward(opts)
	require.NoError(t, err)
	return f
}

func TestForwardByteExactWithHeaders(t *testing.T) {
	t.Parallel()
	body := "{\"title\":\"Ünïcødé ✓ — 日本語\",\"n\":1}\n"
	got := make(chan *http.Request, 1)
	gotBody := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		gotBody <- b
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "thanks")
	}))
	t.Cleanup(srv.Close)

	f := newForward(t, srv.URL+"/github?x=1", nil)
	require.Equal(t, "forward "+srv.URL+"/github", f.Name())
	out := f.Handle(context.Background(), Job{Webhook: testWebhook(body)})
	require.True(t, out.OK, out.Error)
	require.Equal(t, 202, out.ResponseStatus)
	require.Equal(t, "thanks", out.Output)

	r := <-got
	require.Equal(t, []byte(body), <-gotBody, "body must be byte-exact")
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/github", r.URL.Path)
	require.Equal(t, "pull_request", r.Header.Get("X-GitHub-Event"))
	require.Equal(t, "abc123", r.Header.Get("X-GitHub-Delivery"))
	require.Equal(t, "sha256=deadbeef", r.Header.Get("X-Hub-Signature-256"))
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, "GitHub-Hookshot/1", r.Header.Get("User-Agent"))
	require.Equal(t, "github:abc123:1707912345000", r.Header.Get(shared.HeaderDeliveryID))
	require.Equal(t, "github", r.Header.Get(shared.HeaderSource))
	require.Equal(t, "3", r.Header.Get(shared.HeaderAttempt))
	require.Equal(t, "github:abc123:1707912345000", r.Header.Get(shared.HeaderIdempotencyKey))
	require.Empty(t, r.Header.Get("X-Hop"), "headers listed in Connection are hop-by-hop")
	require.Empty(t, r.Header.Get("Keep-Alive"))
	require.Empty(t, r.TransferEncoding, "body is sent with its own length")
	require.Equal(t, int64(len(body)), r.ContentLength)
	require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), r.Host)
}

func TestForwardOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		retry4xx  bool
		ok        bool
		retryable bool
		errPart   string
	}{
		{200, true, true, false, ""},
		{204, true, true, false, ""},
		{404, true, false, true, "HTTP 404: not here"},
		{404, false, false, false, "HTTP 404: not here"},
		{400, false, false, false, "HTTP 400"},
		{429, false, false, true, "HTTP 429"},
		{500, false, false, true, "HTTP 500"},
		{503, false, false, true, "HTTP 503"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			if tc.status == 404 {
				io.WriteString(w, "not here\n")
			}
		}))
		out := newForward(t, srv.URL, func(o *ForwardOptions) { o.Retry4xx = tc.retry4xx }).
			Handle(context.Background(), Job{Webhook: testWebhook("{}")})
		srv.Close()
		require.Equal(t, tc.status, out.ResponseStatus)
		require.Equal(t, tc.ok, out.OK, "status %d", tc.status)
		require.Equal(t, tc.retryable, out.Retryable, "status %d", tc.status)
		require.Contains(t, out.Error, tc.errPart, "status %d", tc.status)
	}
}

func TestForwardTruncatesResponseBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, strings.Repeat("é", 10000))
	}))
	t.Cleanup(srv.Close)
	out := newForward(t, srv.URL, nil).Handle(context.Background(), Job{Webhook: testWebhook("{}")})
	require.False(t, out.OK)
	require.LessOrEqual(t, len(out.Error), 300)
	require.True(t, strings.HasSuffix(out.Error, "…"))
	require.NotContains(t, out.Error, "\uFFFD", "never cut inside a UTF-8 sequence")
	require.LessOrEqual(t, len(out.Output), MaxOutput+len("…"))
	require.Greater(t, len(out.Output), MaxOutput-4)
	require.True(t, strings.HasPrefix(out.Output, "éé"))
	require.True(t, strings.HasSuffix(out.Output, "é…"))
}

func TestForwardDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	out := newForward(t, srv.URL+"/old", func(o *ForwardOptions) { o.Retry4xx = false }).
		Handle(context.Background(), Job{Webhook: testWebhook("{}")})
	require.False(t, out.OK)
	require.False(t, out.Retryable)
	require.Contains(t, out.Error, "HTTP 307 redirect to /new (not followed)")
	require.Equal(t, "/old", <-hits)
	require.Empty(t, hits, "the redirect target must not be requested")
}

func TestForwardTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	out := newForward(t, srv.URL, func(o *ForwardOptions) { o.Timeout = 100 * time.Millisecond }).
		Handle(context.Background(), Job{Webhook: testWebhook("{}")})
	require.False(t, out.OK)
	require.True(t, out.Retryable)
	require.Contains(t, out.Error, "timeout after 100ms")
}

// TestForwardKeepsAConnectionPerWorker: MaxConns concurrent forwards keep
// their connections alive between webhooks instead of dialing again. A
// connection goes back to the idle pool just after its response was read
// (in the transport's own goroutine), so a busy machine may dial one more
// now and then; with idle connections for only some of the workers, each
// round would dial again (160 requests: dozens of dials).
func TestForwardKeepsAConnectionPerWorker(t *testing.T) {
	t.Parallel()
	const workers = 8
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f := newForward(t, srv.URL, func(o *ForwardOptions) { o.MaxConns = workers })
	for range 20 {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				out := f.Handle(context.Background(), Job{Webhook: testWebhook(`{"n":1}`)})
				require.True(t, out.OK, out.Error)
			})
		}
		wg.Wait()
	}
	require.LessOrEqual(t, dials.Load(), int32(2*workers))
}

// Header names are spelled canonically once and remembered, up to
// maxNames; names past the bound are still forwarded, spelled each time.
func TestForwardRemembersBoundedHeaderNames(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header
	}))
	t.Cleanup(srv.Close)
	f := newForward(t, srv.URL, nil)
	w := testWebhook("{}")
	for i := range maxNames + 50 {
		w.Headers[fmt.Sprintf("x-extra-%d", i)] = "v"
	}
	for range 2 {
		out := f.Handle(context.Background(), Job{Webhook: w})
		require.True(t, out.OK, out.Error)
		h := <-got
		require.Equal(t, "v", h.Get("X-Extra-0"))
		require.Equal(t, "v", h.Get(fmt.Sprintf("X-Extra-%d", maxNames+49)))
		require.Contains(t, h, "X-Github-Event", "canonical spelling")
	}
	n := 0
	f.names.Range(func(k, v any) bool {
		require.Equal(t, http.CanonicalHeaderKey(k.(string)), v)
		n++
		return true
	})
	require.Equal(t, maxNames, n)

	// Concurrent requests never remember more than the bound either.
	g := newForward(t, srv.URL, nil)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range maxNames {
				name := fmt.Sprintf("name-%d", w*maxNames/4+i) // overlapping, 3 * maxNames in all
				require.Equal(t, "X-"+strings.ToUpper(name[:1])+name[1:], g.canonical("x-"+name))
			}
		})
	}
	wg.Wait()
	n = 0
	g.names.Range(func(any, any) bool { n++; return true })
	require.Equal(t, maxNames, n)
	require.EqualValues(t, maxNames, g.namesCount.Load())
}

// BenchmarkForward forwards a GitHub-sized webhook (its headers and a 2 KB
// body) to a local receiver over kept connections.
func BenchmarkForward(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(srv.Close)
	f, err := NewForward(ForwardOptions{URL: srv.URL + "/github", ConnectTimeout: time.Second, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	w := testWebhook(strings.Repeat("x", 2048))
	for k, v := range map[string]string{"x-github-hook-id": "1", "x-github-hook-installation-target-id": "2",
		"x-github-hook-installation-target-type": "repository", "accept": "*/*", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		w.Headers[k] = v
	}
	b.ReportAllocs()
	for b.Loop() {
		if out := f.Handle(context.Background(), Job{Webhook: w}); !out.OK {
			b.Fatal(out.Error)
		}
	}
}
