package cloudapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// DialSocket opens the socket on which the cloud pushes deliveries
// (shared/socket.go), authenticated by token; a client that compresses
// offers permessage-deflate, without context takeover (no window kept per
// connection), which the cloud accepts. A refused upgrade is an
// *Error with the cloud's status (401, 410, …), or its status alone when
// something other than the cloud answered (a proxy that strips Upgrade).
func (c *Client) DialSocket(ctx context.Context, token string) (*websocket.Conn, error) {
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
	return conn, nil
}

// DecodeFrame decodes a frame of the socket into f. A webhooks frame —
// megabytes a second while a host drains — is walked as a heartbeat's
// answer is (decodeHeartbeat), with the same values and errors as
// json.Unmarshal's; other frames are small and go through json.Unmarshal.
func DecodeFrame(data []byte, f *shared.Frame) error {
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

// DecodeWebhooksJSON decodes a binary webhooks frame's JSON
// (shared.DecodeWebhooksJSON), walked as a heartbeat's answer is; anything
// the walk cannot read is decoded again by shared.DecodeWebhooksJSON, whose
// error is the one returned.
func DecodeWebhooksJSON(part []byte) ([]shared.Webhook, []int, error) {
	var v [2][]byte
	if jsonwalk.Fields(part, binaryFrameMembers, v[:]) && string(v[0]) == `"`+shared.FrameWebhooks+`"` && len(v[1]) > 0 && v[1][0] == '[' {
		lens := make([]int, 0, 64)
		if hooks, ok := walkWebhooks(v[1], &lens); ok {
			return hooks, lens, nil
		}
	}
	return shared.DecodeWebhooksJSON(part)
}
