package cloudapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// BenchmarkReadFrame reads webhooks frames of 200 webhooks of 14 KB (a
// drain's batch, 3.8 MB as JSON) from a socket: "kept" as Socket.Read reads
// a text frame, into the buffer kept between frames; "read-all" into a
// fresh slice each (websocket.Conn.Read), as it did before; "binary" as
// Socket.Read reads a binary frame (2.9 MB).
//
//	go test -run '^$' -bench ReadFrame -benchmem -benchtime 200x ./host/cloudapi/
func BenchmarkReadFrame(b *testing.B) {
	f := &shared.Frame{Type: shared.FrameWebhooks}
	body := bytes.Repeat([]byte(`{"action":"opened","x":"`+string(bytes.Repeat([]byte("a"), 14<<10))+`"}`), 1)
	for i := range 200 {
		f.Webhooks = append(f.Webhooks, shared.Webhook{DeliveryID: "github:e-" + strconv.Itoa(i) + ":1", Source: "github",
			EventType: "push", Headers: map[string]string{"X-GitHub-Event": "push"}, RawBody: body, Attempt: 1})
	}
	data, err := json.Marshal(f)
	require.NoError(b, err)
	bin, err := shared.AppendWebhooksFrame(nil, f.Webhooks)
	require.NoError(b, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, msg := websocket.MessageText, data
		if strings.HasPrefix(r.URL.Path, "/binary/") {
			typ, msg = websocket.MessageBinary, bin
		}
		for {
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	for _, mode := range []string{"kept", "read-all", "binary"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			if mode == "read-all" {
				conn, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):]+"/"+mode, nil)
				require.NoError(b, err)
				defer conn.CloseNow()
				conn.SetReadLimit(MaxSocketFrame)
				b.SetBytes(int64(len(data)))
				b.ResetTimer()
				for range b.N {
					_, raw, err := conn.Read(ctx)
					require.NoError(b, err)
					var got shared.Frame
					require.NoError(b, decodeFrame(raw, &got))
					require.Len(b, got.Webhooks, 200)
				}
				return
			}
			sock, err := New(srv.URL+"/"+mode, srv.Client(), "bench").DialSocket(ctx, "tok")
			require.NoError(b, err)
			defer sock.CloseNow()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for range b.N {
				got, err := sock.Read(ctx)
				require.NoError(b, err)
				require.Len(b, got.Webhooks, 200)
			}
		})
	}
}
