package cloudapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
