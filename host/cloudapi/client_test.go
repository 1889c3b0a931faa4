package cloudapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

func TestHeartbeatGzipAndAuth(t *testing.T) {
	t.Parallel()
	raw := []byte("exact\x00bytes ✓\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, shared.PathHeartbeat, r.URL.Path)
		require.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		require.Equal(t, "gzip", r.Header.Get("Accept-Encoding"))
		var req shared.HeartbeatRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		require.Equal(t, []string{"a"}, req.WebhookAcks)
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		json.NewEncoder(gz).Encode(shared.HeartbeatResponse{Status: "ok", More: true,
			Webhooks: []shared.Webhook{{DeliveryID: "d", RawBody: raw}}})
		gz.Close()
	}))
	t.Cleanup(srv.Close)

	resp, err := New(srv.URL+"/", srv.Client(), "test").Heartbeat(context.Background(), "tok",
		shared.HeartbeatRequest{WebhookAcks: []string{"a"}})
	require.NoError(t, err)
	require.True(t, resp.More)
	require.Equal(t, raw, resp.Webhooks[0].RawBody)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case shared.PathToken:
			w.WriteHeader(http.StatusGone)
			json.NewEncoder(w).Encode(shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeGone, Message: "host deactivated"}})
		default:
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
		}
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, srv.Client(), "test")

	_, err := c.Token(context.Background(), shared.TokenRequest{HostID: "h", HostCredential: "c"})
	require.Equal(t, http.StatusGone, StatusOf(err))
	require.EqualError(t, err, "token: cloud answered 410 gone: host deactivated")

	_, err = c.Heartbeat(context.Background(), "t", shared.HeartbeatRequest{})
	require.Equal(t, http.StatusBadGateway, StatusOf(err))
	require.ErrorContains(t, err, "bad gateway")
	require.Equal(t, 0, StatusOf(context.Canceled))
}

// TestAnswersOfChangingSizes: each answer is decoded on its own, whatever
// the size of the one before (read buffers are reused).
func TestAnswersOfChangingSizes(t *testing.T) {
	t.Parallel()
	sizes := []int{300, 3, 20000, 0, 7}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ws []shared.Webhook
		for i := range sizes[n] {
			ws = append(ws, shared.Webhook{DeliveryID: fmt.Sprintf("d%d", i), RawBody: []byte(strings.Repeat("x", i%50))})
		}
		n++
		json.NewEncoder(w).Encode(shared.HeartbeatResponse{Status: "ok", Webhooks: ws})
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, srv.Client(), "test")
	var kept []shared.HeartbeatResponse
	for range sizes {
		resp, err := c.Heartbeat(context.Background(), "t", shared.HeartbeatRequest{})
		require.NoError(t, err)
		kept = append(kept, resp)
	}
	for i, resp := range kept {
		require.Len(t, resp.Webhooks, sizes[i])
		for j, w := range resp.Webhooks {
			require.Equal(t, fmt.Sprintf("d%d", j), w.DeliveryID)
			require.Equal(t, strings.Repeat("x", j%50), string(w.RawBody))
		}
	}
}

// A draining host reads answer after answer of megabytes into one reused
// buffer; once answers are small again, the big buffer is let go.
func TestAnswerBufferKeptWhileAnswersAreLarge(t *testing.T) {
	for len(answerBuffers) > 0 {
		<-answerBuffers
	}
	b := getAnswerBuffer()
	b.Write(make([]byte, 3<<20))
	putAnswerBuffer(b)
	reused := getAnswerBuffer()
	require.Same(t, b, reused, "kept after a large answer")
	require.Zero(t, reused.Len())

	reused.WriteString(`{"status":"ok"}`)
	putAnswerBuffer(reused)
	require.NotSame(t, b, getAnswerBuffer(), "let go after a small answer")

	small := getAnswerBuffer()
	small.WriteString(`{"status":"ok"}`)
	putAnswerBuffer(small)
	require.Same(t, small, getAnswerBuffer(), "a small buffer is kept")
}

// TestSources: GET /api/hosts/sources with the host's token; a cloud that
// predates it answers 404, which the caller can tell.
func TestSources(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		require.Equal(t, http.MethodGet, r.Method)
		require.Equal(t, shared.PathHostSources, r.URL.Path)
		json.NewEncoder(w).Encode(shared.HostSourcesResponse{Sources: []shared.HostSource{
			{Name: "github", Provider: "github", Enabled: true, Events: []string{"push"}}}})
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, srv.Client(), "test")
	got, err := c.Sources(context.Background(), "tok")
	require.NoError(t, err)
	require.Equal(t, []shared.HostSource{{Name: "github", Provider: "github", Enabled: true, Events: []string{"push"}}}, got.Sources)
	_, err = c.Sources(context.Background(), "other")
	require.Equal(t, http.StatusNotFound, StatusOf(err))
	require.ErrorContains(t, err, "host sources: cloud answered 404")
}
