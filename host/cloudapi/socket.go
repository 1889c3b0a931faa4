package cloudapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// Bounds of the host's end of the socket.
const (
	// MaxSocketFrame bounds a frame the host reads: a batch of webhooks
	// (the cloud's batch bytes, base64-encoded in a text frame, with
	// headers); a larger one ends the socket.
	MaxSocketFrame = 64 << 20
	// maxKeptFrameBuffer bounds the buffer a socket keeps between frames:
	// a full batch as a text frame (the cloud's 4 MiB of bodies,
	// base64-encoded, with headers); a binary frame's bodies are not read
	// into it.
	maxKeptFrameBuffer = 8 << 20
	// socketWriteTimeout bounds the write of one frame.
	socketWriteTimeout = 30 * time.Second
)

// Socket is the host's end of the socket on which the cloud pushes
// deliveries (shared/socket.go): frames written as JSON text, frames read
// as text or, for webhooks, in the binary layout (shared.ReadWebhooksFrame).
// Read is called from one goroutine at a time; Write, Ping and the closes
// from any.
type Socket struct {
	conn *websocket.Conn
	// buf is the read buffer kept between frames: a batch of webhooks is
	// megabytes, and reading each into a fresh slice grown from empty
	// allocated (and the kernel zeroed) about twice that for every frame.
	buf bytes.Buffer
}

// FrameError is a frame of the cloud that broke the protocol: the host
// closes the socket with CloseProtocol and the reason.
type FrameError struct{ Reason string }

func (e *FrameError) Error() string { return "socket: " + e.Reason }

// DialSocket opens the socket, authenticated by token; a client that
// compresses offers permessage-deflate, without context takeover (no
// window kept per connection), which the cloud accepts. A refused upgrade
// is an *Error with the cloud's status (401, 410, …), or its status alone
// when something other than the cloud answered (a proxy that strips
// Upgrade).
func (c *Client) DialSocket(ctx context.Context, token string) (*Socket, error) {
	u := c.baseURL + shared.PathSocket
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("User-Agent", c.userAgent)
	opts := &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h}
	if c.compress {
		// Messages of 512 bytes and more are compressed, each on its
		// own, both ways.
		opts.CompressionMode = websocket.CompressionNoContextTakeover
	}
	conn, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			return nil, fmt.Errorf("socket: %w", errorFrom(resp.StatusCode, data))
		}
		return nil, fmt.Errorf("socket: %w", err)
	}
	conn.SetReadLimit(MaxSocketFrame)
	return &Socket{conn: conn}, nil
}

// Write sends f as a JSON text frame, within socketWriteTimeout.
func (s *Socket) Write(f *shared.Frame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), socketWriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("write %s frame: %w", f.Type, err)
	}
	return nil
}

// Read reads and decodes the cloud's next frame; nothing decoded refers to
// the socket's buffer. A frame that breaks the protocol is a *FrameError;
// other errors are the connection's (CloseCode reads a close's code).
func (s *Socket) Read(ctx context.Context) (*shared.Frame, error) {
	typ, r, err := s.conn.Reader(ctx)
	if err != nil {
		return nil, err
	}
	buf := &s.buf
	buf.Reset()
	defer func() {
		if buf.Cap() > maxKeptFrameBuffer {
			*buf = bytes.Buffer{} // an outsized frame's buffer is not kept
		}
	}()
	if typ == websocket.MessageBinary {
		hooks, err := shared.ReadWebhooksFrame(r, -1, MaxSocketFrame, buf, decodeWebhooksJSON)
		if errors.Is(err, shared.ErrBadFrame) {
			return nil, &FrameError{Reason: err.Error()}
		}
		if err != nil {
			return nil, err
		}
		return &shared.Frame{Type: shared.FrameWebhooks, Webhooks: hooks}, nil
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	var f shared.Frame
	if err := decodeFrame(buf.Bytes(), &f); err != nil {
		return nil, &FrameError{Reason: fmt.Sprintf("malformed frame: %v", err)}
	}
	return &f, nil
}

// Ping pings the cloud and waits for its pong, or ctx.
func (s *Socket) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// Close closes the socket normally, saying why (waiting a few seconds at
// most for the cloud's close frame).
func (s *Socket) Close(reason string) error {
	return s.conn.Close(websocket.StatusNormalClosure, reason)
}

// CloseBroken closes the socket with CloseProtocol when err is a
// *FrameError, saying its reason, and reports whether it did.
func (s *Socket) CloseBroken(err error) bool {
	var fe *FrameError
	if !errors.As(err, &fe) {
		return false
	}
	reason := fe.Reason
	if len(reason) > 120 {
		// A close frame's reason is at most 123 bytes, in UTF-8.
		reason = strings.ToValidUTF8(reason[:120], "")
	}
	_ = s.conn.Close(shared.CloseProtocol, reason)
	return true
}

// CloseNow closes the socket without a close handshake.
func (s *Socket) CloseNow() error { return s.conn.CloseNow() }

// CloseCode is the close code in err, a read's error when the cloud closed
// the socket (shared.CloseRevoked, …), or -1.
func CloseCode(err error) int { return int(websocket.CloseStatus(err)) }

// decodeFrame decodes a frame of the socket into f. A webhooks frame —
// megabytes a second while a host drains — is walked as a heartbeat's
// answer is (decodeHeartbeat), with the same values and errors as
// json.Unmarshal's; other frames are small and go through json.Unmarshal.
func decodeFrame(data []byte, f *shared.Frame) error {
	var typ [1][]byte
	if jsonwalk.Fields(data, frameType, typ[:]) && string(typ[0]) == `"`+shared.FrameWebhooks+`"` {
		var hb shared.HeartbeatResponse
		if walkHeartbeat(data, &hb) && hb.Status == "" && hb.HeartbeatIntervalS == 0 && !hb.More {
			*f = shared.Frame{Type: shared.FrameWebhooks, Webhooks: hb.Webhooks}
			return nil
		}
	}
	*f = shared.Frame{}
	return json.Unmarshal(data, f)
}

var (
	frameType          = []string{"type"}
	binaryFrameMembers = []string{"type", "webhooks"}
)

// decodeWebhooksJSON decodes a binary webhooks frame's JSON
// (shared.DecodeWebhooksJSON), walked as a heartbeat's answer is; anything
// the walk cannot read is decoded again by shared.DecodeWebhooksJSON, whose
// error is the one returned.
func decodeWebhooksJSON(part []byte) ([]shared.Webhook, []int, error) {
	var v [2][]byte
	if jsonwalk.Fields(part, binaryFrameMembers, v[:]) && string(v[0]) == `"`+shared.FrameWebhooks+`"` && len(v[1]) > 0 && v[1][0] == '[' {
		lens := make([]int, 0, 64)
		if hooks, ok := walkWebhooks(v[1], &lens); ok {
			return hooks, lens, nil
		}
	}
	return shared.DecodeWebhooksJSON(part)
}
