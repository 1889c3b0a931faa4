package shared

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// MediaTypeWebhooksBinary is the media type of a heartbeat answer in the
// binary layout of a webhooks frame (AppendHeartbeatAnswer). A host that
// reads it asks for it first in its heartbeat's Accept
// ("application/vnd.relay.webhooks+binary, application/json"); the cloud
// then answers every heartbeat (with webhooks or without) in it, with a
// Content-Length and no Content-Encoding: the bodies go as they are, as
// on the socket. A client that does not ask, and a cloud that predates
// it, have the JSON answer (gzip-compressed when asked): a host reads the
// answer by its Content-Type.
const MediaTypeWebhooksBinary = "application/vnd.relay.webhooks+binary"

// A binary heartbeat answer has the layout of a binary webhooks frame
// (WebhooksFrameHeader): the 8-byte header, then the JSON of the
// HeartbeatResponse — the same members, in the same order and with the
// same omissions as encoding/json writes it — with each webhook's raw_body
// left out and raw_body_len in its place, then the bodies back to back.

// binaryAnswer is a binary heartbeat answer's JSON.
type binaryAnswer struct {
	Status             string          `json:"status"`
	HeartbeatIntervalS int             `json:"heartbeat_interval_s"`
	More               bool            `json:"more"`
	Webhooks           []binaryWebhook `json:"webhooks"`
	Now                time.Time       `json:"now"`
	LeaseS             int             `json:"lease_s,omitempty"`
	PollWhileBusy      bool            `json:"poll_while_busy,omitempty"`
}

// AppendHeartbeatAnswer appends r as a binary heartbeat answer to dst and
// returns it: each body is copied once, into the answer. A webhook's Body,
// when set, must be valid JSON (it is written as it is).
func AppendHeartbeatAnswer(dst []byte, r *HeartbeatResponse) ([]byte, error) {
	return appendBinary(dst, r.Webhooks, len(r.Status)+64, func(out []byte) []byte {
		out = append(out, `{"status":`...)
		out = jsonwalk.AppendString(out, r.Status)
		out = append(out, `,"heartbeat_interval_s":`...)
		out = strconv.AppendInt(out, int64(r.HeartbeatIntervalS), 10)
		out = append(out, `,"more":`...)
		out = strconv.AppendBool(out, r.More)
		return append(out, `,"webhooks":`...)
	}, func(out []byte) ([]byte, error) {
		out = append(out, `,"now":`...)
		out, err := appendJSONTime(out, r.Now)
		if err != nil {
			return out, fmt.Errorf("encode heartbeat answer: now: %w", err)
		}
		if r.LeaseS != 0 {
			out = append(out, `,"lease_s":`...)
			out = strconv.AppendInt(out, int64(r.LeaseS), 10)
		}
		if r.PollWhileBusy {
			out = append(out, `,"poll_while_busy":true`...)
		}
		return append(out, '}'), nil
	})
}

// DecodeHeartbeatAnswer decodes a binary heartbeat answer (the whole
// message) into out: its webhooks' raw bodies are slices of msg.
// decodeJSON reads the JSON into out, without the raw bodies, and returns
// their lengths (nil: DecodeHeartbeatJSON). What breaks the layout is
// refused with an error wrapping ErrBadFrame, and out is left zero.
func DecodeHeartbeatAnswer(msg []byte, out *HeartbeatResponse, decodeJSON func([]byte, *HeartbeatResponse) ([]int, error)) error {
	return decodeAnswer(out, decodeJSON, func(webhooksJSON func([]byte) ([]Webhook, []int, error)) ([]Webhook, error) {
		return DecodeWebhooksFrame(msg, webhooksJSON)
	})
}

// ReadHeartbeatAnswer reads a binary heartbeat answer from r into out, as
// ReadWebhooksFrame reads a webhooks frame (length, max and buf as there);
// decodeJSON as DecodeHeartbeatAnswer's. What breaks the layout is refused
// with an error wrapping ErrBadFrame; on any error out is left zero.
func ReadHeartbeatAnswer(r io.Reader, length int64, max int, buf *bytes.Buffer, out *HeartbeatResponse, decodeJSON func([]byte, *HeartbeatResponse) ([]int, error)) error {
	return decodeAnswer(out, decodeJSON, func(webhooksJSON func([]byte) ([]Webhook, []int, error)) ([]Webhook, error) {
		return ReadWebhooksFrame(r, length, max, buf, webhooksJSON)
	})
}

// decodeAnswer reads a binary heartbeat answer into out with read, which
// reads the message's JSON with the function it is given.
func decodeAnswer(out *HeartbeatResponse, decodeJSON func([]byte, *HeartbeatResponse) ([]int, error),
	read func(func([]byte) ([]Webhook, []int, error)) ([]Webhook, error)) error {
	if decodeJSON == nil {
		decodeJSON = DecodeHeartbeatJSON
	}
	*out = HeartbeatResponse{}
	hooks, err := read(func(part []byte) ([]Webhook, []int, error) {
		lens, err := decodeJSON(part, out)
		return out.Webhooks, lens, err
	})
	if err != nil {
		*out = HeartbeatResponse{}
		return err
	}
	out.Webhooks = hooks
	return nil
}

// DecodeHeartbeatJSON decodes a binary heartbeat answer's JSON into out,
// the webhooks without their raw bodies, and returns the bodies' lengths.
func DecodeHeartbeatJSON(part []byte, out *HeartbeatResponse) ([]int, error) {
	var a binaryAnswer
	if err := json.Unmarshal(part, &a); err != nil {
		return nil, badFrame("malformed JSON: %v", err)
	}
	hooks, lens, err := fromBinaryWebhooks(a.Webhooks)
	if err != nil {
		return nil, err
	}
	if a.Webhooks == nil {
		hooks = nil // null, as encoding/json reads it
	}
	*out = HeartbeatResponse{Status: a.Status, HeartbeatIntervalS: a.HeartbeatIntervalS, More: a.More,
		Webhooks: hooks, Now: a.Now, LeaseS: a.LeaseS, PollWhileBusy: a.PollWhileBusy}
	return lens, nil
}
