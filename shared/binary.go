package shared

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// A binary webhooks frame, sent to a host that said binary_webhooks in its
// hello, carries the raw bodies as they are instead of base64 in JSON:
//
//	0        4        8                8+J                8+J+B
//	┌────────┬────────┬────────────────┬──────────────────┐
//	│ J: u32 │ B: u32 │ JSON (J bytes) │ bodies (B bytes) │
//	└────────┴────────┴────────────────┴──────────────────┘
//	J, B: unsigned 32-bit big-endian lengths; the message is 8+J+B bytes.
//
// The JSON is the webhooks frame with each webhook's raw_body left out and
// raw_body_len (its length in bytes) in its place; the bodies follow back
// to back in the order of the webhooks, and their lengths add up to B.
// B lets a reader allocate the bodies' room once, before reading them, and
// slice each body out of it.
//
// A heartbeat's binary answer has the same layout (answer.go). The cloud
// writes both with AppendWebhooksFrame and AppendHeartbeatAnswer; a host
// reads both as they arrive with ReadWebhooksFrame and ReadHeartbeatAnswer,
// a message in hand with DecodeWebhooksFrame and DecodeHeartbeatAnswer,
// all of them through the same checks.
const WebhooksFrameHeader = 8

// binaryWebhook is a webhook in a binary frame's JSON: Webhook with the
// length of its raw body instead of the body.
type binaryWebhook struct {
	DeliveryID    string            `json:"delivery_id"`
	Source        string            `json:"source"`
	EventType     string            `json:"event_type"`
	EventAction   string            `json:"event_action"`
	Headers       map[string]string `json:"headers"`
	Body          json.RawMessage   `json:"body,omitempty"`
	RawBody       json.RawMessage   `json:"raw_body,omitempty"` // refused: the body follows the JSON
	RawBodyLen    *int              `json:"raw_body_len"`
	ReceivedAt    time.Time         `json:"received_at"`
	Attempt       int               `json:"attempt"`
	CorrelationID string            `json:"correlation_id"`
}

type binaryFrame struct {
	Type     string          `json:"type"`
	Webhooks []binaryWebhook `json:"webhooks"`
}

// AppendWebhooksFrame appends the binary webhooks frame of hooks to dst and
// returns it: each body is copied once, into the frame. A webhook's Body,
// when set, must be valid JSON (it is written as it is).
func AppendWebhooksFrame(dst []byte, hooks []Webhook) ([]byte, error) {
	if hooks == nil {
		hooks = []Webhook{} // a frame's list is never null
	}
	return appendBinary(dst, hooks, 0, func(out []byte) []byte {
		return append(out, `{"type":"webhooks","webhooks":`...)
	}, func(out []byte) ([]byte, error) {
		return append(out, '}'), nil
	})
}

// appendBinary appends a binary message (the layout of a webhooks frame)
// whose JSON is what head writes, the list of hooks (null when nil), then
// what tail writes; extra is a guess of the bytes head and tail add.
func appendBinary(dst []byte, hooks []Webhook, extra int, head func([]byte) []byte, tail func([]byte) ([]byte, error)) ([]byte, error) {
	start := len(dst)
	total, jsonSize := 0, 64+extra
	for i := range hooks {
		w := &hooks[i]
		total += len(w.RawBody)
		jsonSize += 256 + len(w.DeliveryID) + len(w.Source) + len(w.EventType) + len(w.EventAction) + len(w.CorrelationID) + len(w.Body)
		for k, v := range w.Headers {
			jsonSize += len(k) + len(v) + 6
		}
	}
	if uint64(total) > maxUint32 {
		return dst, errors.New("encode binary webhooks: bodies larger than 4 GiB")
	}
	out := growBytes(dst, WebhooksFrameHeader+jsonSize+total)
	out = append(out, make([]byte, WebhooksFrameHeader)...)
	out = head(out)
	out, err := appendBinaryWebhooks(out, hooks)
	if err == nil {
		out, err = tail(out)
	}
	if err != nil {
		return dst, err
	}
	j := len(out) - start - WebhooksFrameHeader
	if uint64(j) > maxUint32 {
		return dst, errors.New("encode binary webhooks: JSON larger than 4 GiB")
	}
	binary.BigEndian.PutUint32(out[start:], uint32(j))
	binary.BigEndian.PutUint32(out[start+4:], uint32(total))
	out = growBytes(out, total)
	for i := range hooks {
		out = append(out, hooks[i].RawBody...)
	}
	return out, nil
}

// appendBinaryWebhooks appends the JSON list of hooks, each with
// raw_body_len in place of raw_body; nil is null, as encoding/json has it.
func appendBinaryWebhooks(out []byte, hooks []Webhook) ([]byte, error) {
	if hooks == nil {
		return append(out, "null"...), nil
	}
	out = append(out, '[')
	for i := range hooks {
		w := &hooks[i]
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"delivery_id":`...)
		out = jsonwalk.AppendString(out, w.DeliveryID)
		out = append(out, `,"source":`...)
		out = jsonwalk.AppendString(out, w.Source)
		out = append(out, `,"event_type":`...)
		out = jsonwalk.AppendString(out, w.EventType)
		out = append(out, `,"event_action":`...)
		out = jsonwalk.AppendString(out, w.EventAction)
		out = append(out, `,"headers":`...)
		if w.Headers == nil {
			out = append(out, "null"...)
		} else {
			out = append(out, '{')
			first := true
			for k, v := range w.Headers {
				if !first {
					out = append(out, ',')
				}
				first = false
				out = jsonwalk.AppendString(out, k)
				out = append(out, ':')
				out = jsonwalk.AppendString(out, v)
			}
			out = append(out, '}')
		}
		if len(w.Body) > 0 {
			if !json.Valid(w.Body) {
				return out, fmt.Errorf("encode binary webhooks: webhook %d's body is not JSON", i)
			}
			out = append(out, `,"body":`...)
			out = append(out, w.Body...)
		}
		out = append(out, `,"raw_body_len":`...)
		out = strconv.AppendInt(out, int64(len(w.RawBody)), 10)
		out = append(out, `,"received_at":`...)
		var err error
		if out, err = appendJSONTime(out, w.ReceivedAt); err != nil {
			return out, fmt.Errorf("encode binary webhooks: webhook %d's received_at: %w", i, err)
		}
		out = append(out, `,"attempt":`...)
		out = strconv.AppendInt(out, int64(w.Attempt), 10)
		out = append(out, `,"correlation_id":`...)
		out = jsonwalk.AppendString(out, w.CorrelationID)
		out = append(out, '}')
	}
	return append(out, ']'), nil
}

// appendJSONTime appends t as encoding/json writes it.
func appendJSONTime(out []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return out, errors.New("outside years 0–9999")
	}
	out = append(out, '"')
	out = t.AppendFormat(out, time.RFC3339Nano)
	return append(out, '"'), nil
}

const maxUint32 = 1<<32 - 1

// growBytes is b with room for n more bytes.
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	g := make([]byte, len(b), len(b)+n)
	copy(g, b)
	return g
}

// ErrBadFrame wraps every reason a binary webhooks frame or heartbeat
// answer is refused.
var ErrBadFrame = errors.New("bad binary webhooks message")

func badFrame(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadFrame, fmt.Sprintf(format, args...))
}

// WebhooksFrameSizes reads a binary webhooks frame's header: the lengths of
// its JSON and of its bodies, which with the header must not pass max
// bytes (the reader's limit).
func WebhooksFrameSizes(header []byte, max int) (jsonLen, bodiesLen int, err error) {
	if len(header) < WebhooksFrameHeader {
		return 0, 0, badFrame("%d bytes, shorter than its %d-byte header", len(header), WebhooksFrameHeader)
	}
	j := uint64(binary.BigEndian.Uint32(header))
	b := uint64(binary.BigEndian.Uint32(header[4:]))
	if WebhooksFrameHeader+j+b > uint64(max) {
		return 0, 0, badFrame("declares %d bytes of JSON and %d of bodies, more than %d in all", j, b, max)
	}
	if j == 0 {
		return 0, 0, badFrame("no JSON")
	}
	return int(j), int(b), nil
}

// DecodeWebhooksJSON decodes a binary webhooks frame's JSON: the webhooks,
// without their raw bodies, and the bodies' lengths.
func DecodeWebhooksJSON(part []byte) ([]Webhook, []int, error) {
	var f binaryFrame
	if err := json.Unmarshal(part, &f); err != nil {
		return nil, nil, badFrame("malformed JSON: %v", err)
	}
	if f.Type != FrameWebhooks {
		return nil, nil, badFrame("type %q, want %q", f.Type, FrameWebhooks)
	}
	return fromBinaryWebhooks(f.Webhooks)
}

// fromBinaryWebhooks is the webhooks of a binary message's JSON, without
// their raw bodies, and the bodies' lengths.
func fromBinaryWebhooks(ws []binaryWebhook) ([]Webhook, []int, error) {
	hooks := make([]Webhook, len(ws))
	lens := make([]int, len(ws))
	for i, w := range ws {
		if w.RawBody != nil {
			return nil, nil, badFrame("webhook %d carries raw_body in the JSON", i)
		}
		if w.RawBodyLen == nil {
			return nil, nil, badFrame("webhook %d has no raw_body_len", i)
		}
		hooks[i] = Webhook{DeliveryID: w.DeliveryID, Source: w.Source, EventType: w.EventType,
			EventAction: w.EventAction, Headers: w.Headers, Body: w.Body,
			ReceivedAt: w.ReceivedAt, Attempt: w.Attempt, CorrelationID: w.CorrelationID}
		lens[i] = *w.RawBodyLen
	}
	return hooks, lens, nil
}

// AttachRawBodies gives each webhook its raw body, sliced out of bodies
// (not copied) by lens: each in range, and all of bodies used.
func AttachRawBodies(hooks []Webhook, lens []int, bodies []byte) error {
	if len(lens) != len(hooks) {
		return badFrame("%d lengths for %d webhooks", len(lens), len(hooks))
	}
	off := 0
	for i, n := range lens {
		if n < 0 || n > len(bodies)-off {
			return badFrame("webhook %d's raw_body_len %d is out of range (%d bytes of bodies left)", i, n, len(bodies)-off)
		}
		// Capped: appending to one body cannot write over the next.
		hooks[i].RawBody = bodies[off : off+n : off+n]
		off += n
	}
	if off != len(bodies) {
		return badFrame("the raw_body_len add up to %d, the bodies are %d bytes", off, len(bodies))
	}
	return nil
}

// DecodeWebhooksFrame decodes a binary webhooks frame (the whole message):
// its webhooks, their raw bodies slices of msg. decodeJSON reads the JSON
// (nil: DecodeWebhooksJSON).
func DecodeWebhooksFrame(msg []byte, decodeJSON func([]byte) ([]Webhook, []int, error)) ([]Webhook, error) {
	j, b, err := WebhooksFrameSizes(msg, len(msg))
	if err != nil {
		return nil, err
	}
	if WebhooksFrameHeader+j+b != len(msg) {
		return nil, badFrame("declares %d bytes, the message is %d", WebhooksFrameHeader+j+b, len(msg))
	}
	return decodeBinary(msg[WebhooksFrameHeader:WebhooksFrameHeader+j], msg[WebhooksFrameHeader+j:], decodeJSON)
}

// ReadWebhooksFrame reads a message in the binary layout — a socket's
// webhooks frame or a heartbeat's binary answer — from r, which ends where
// the message does: its JSON into buf (grown as needed, and not kept by
// what is returned), its bodies into one slice of their size, read into
// once, out of which each webhook's raw body is sliced (the webhooks of a
// message keep it until the last of them is done with). length is the
// message's length when the transport says it (-1: not said), max the
// reader's limit on it. decodeJSON reads the JSON (nil:
// DecodeWebhooksJSON). A message that breaks the layout — over max, cut
// short, running on past its header's lengths, or with JSON that does not
// add up — is refused with an error wrapping ErrBadFrame; a read that
// failed otherwise returns r's error.
func ReadWebhooksFrame(r io.Reader, length int64, max int, buf *bytes.Buffer, decodeJSON func([]byte) ([]Webhook, []int, error)) ([]Webhook, error) {
	var h [WebhooksFrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, cutShort(err, "shorter than its header")
	}
	jsonLen, bodiesLen, err := WebhooksFrameSizes(h[:], max)
	if err != nil {
		return nil, err
	}
	if size := int64(WebhooksFrameHeader + jsonLen + bodiesLen); length >= 0 && length != size {
		return nil, badFrame("declares %d bytes, the message is %d", size, length)
	}
	buf.Grow(jsonLen)
	part := buf.AvailableBuffer()[:jsonLen]
	if _, err := io.ReadFull(r, part); err != nil {
		return nil, cutShort(err, "ends in its JSON")
	}
	bodies := make([]byte, bodiesLen)
	if _, err := io.ReadFull(r, bodies); err != nil {
		return nil, cutShort(err, "ends in its bodies")
	}
	if _, err := io.ReadFull(r, h[:1]); err != io.EOF {
		return nil, cutShort(err, "longer than its header says")
	}
	return decodeBinary(part, bodies, decodeJSON)
}

// cutShort is the error of a read of a binary message that ended early
// (or, err nil, went on past its end): the message is refused (why);
// other errors are the reader's.
func cutShort(err error, why string) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return badFrame("%s", why)
	}
	return err
}

// decodeBinary is the webhooks of a binary message's JSON (part, read by
// decodeJSON; nil: DecodeWebhooksJSON), their raw bodies sliced out of
// bodies.
func decodeBinary(part, bodies []byte, decodeJSON func([]byte) ([]Webhook, []int, error)) ([]Webhook, error) {
	if decodeJSON == nil {
		decodeJSON = DecodeWebhooksJSON
	}
	hooks, lens, err := decodeJSON(part)
	if err != nil {
		return nil, err
	}
	if err := AttachRawBodies(hooks, lens, bodies); err != nil {
		return nil, err
	}
	return hooks, nil
}
