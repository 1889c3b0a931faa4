package cloudapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// A client that compresses does not ask for the binary layout, asks for
// gzip, and reads the gzip-compressed JSON answer: bodies byte-exact
// (empty, not UTF-8, CRLF, 300 KB). One that does not asks for binary
// first.
func TestHeartbeatCompressAsksForGzipJSON(t *testing.T) {
	t.Parallel()
	hooks := binaryHooks()
	for _, tc := range []struct {
		name   string
		opts   []Option
		accept string
	}{
		{"compress", []Option{Compress(true)}, "application/json"},
		{"default", nil, shared.MediaTypeWebhooksBinary + ", application/json"},
		{"compress off", []Option{Compress(false)}, shared.MediaTypeWebhooksBinary + ", application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var accept, encoding string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				accept, encoding = r.Header.Get("Accept"), r.Header.Get("Accept-Encoding")
				// A cloud answers JSON, gzip-compressed, to an Accept
				// without the binary layout.
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				require.NoError(t, json.NewEncoder(zw).Encode(shared.HeartbeatResponse{Status: "ok", Webhooks: hooks}))
				require.NoError(t, zw.Close())
			}))
			t.Cleanup(srv.Close)
			got, err := New(srv.URL, srv.Client(), "test", tc.opts...).Heartbeat(context.Background(), "tok", shared.HeartbeatRequest{})
			require.NoError(t, err)
			require.Equal(t, tc.accept, accept)
			require.Equal(t, "gzip", encoding)
			require.Len(t, got.Webhooks, len(hooks))
			for i, w := range hooks {
				require.Equal(t, w.RawBody, got.Webhooks[i].RawBody, "body %d byte-exact", i)
			}
		})
	}
}

// A client that compresses offers permessage-deflate without context
// takeover on the socket's upgrade, and a binary message, compressed by a
// peer that agreed, arrives whole; one that does not offers nothing.
func TestDialSocketCompress(t *testing.T) {
	t.Parallel()
	frame, err := shared.AppendWebhooksFrame(nil, binaryHooks())
	require.NoError(t, err)
	for _, compress := range []bool{true, false} {
		t.Run(map[bool]string{true: "compress", false: "default"}[compress], func(t *testing.T) {
			t.Parallel()
			offered, agreed := make(chan string, 1), make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				offered <- r.Header.Get("Sec-WebSocket-Extensions")
				conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionNoContextTakeover})
				if err != nil {
					return
				}
				agreed <- w.Header().Get("Sec-WebSocket-Extensions")
				defer conn.CloseNow()
				_ = conn.Write(r.Context(), websocket.MessageBinary, frame)
				_, _, _ = conn.Read(r.Context()) // until the client closes
			}))
			t.Cleanup(srv.Close)
			c := New(srv.URL, srv.Client(), "test", Compress(compress))
			sock, err := c.DialSocket(context.Background(), "tok")
			require.NoError(t, err)
			defer sock.CloseNow()
			got, err := sock.Read(context.Background())
			require.NoError(t, err)
			require.Equal(t, shared.FrameWebhooks, got.Type)
			want, err := shared.DecodeWebhooksFrame(frame, nil)
			require.NoError(t, err)
			require.Equal(t, want, got.Webhooks)
			for i := range want {
				require.Equal(t, want[i].RawBody, got.Webhooks[i].RawBody, "body %d byte-exact", i)
			}
			offer, agree := <-offered, <-agreed
			if compress {
				require.True(t, strings.HasPrefix(offer, "permessage-deflate"), offer)
				require.Contains(t, offer, "client_no_context_takeover")
				require.Contains(t, offer, "server_no_context_takeover")
				require.True(t, strings.HasPrefix(agree, "permessage-deflate"), agree)
			} else {
				require.Empty(t, offer)
				require.Empty(t, agree)
			}
			require.NoError(t, sock.Close(""))
		})
	}
}
