package shared

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// The socket protocol: a host keeps one WebSocket to the cloud and the cloud
// pushes deliveries as they are committed, under the same leases, attempts
// and audit trail as the heartbeat's. Every frame is one JSON text message
// with a "type", but for webhooks frames to a host that reads them as
// binary messages (below); pings are WebSocket pings, answered by the
// library.
//
//	host   ── GET /api/hosts/socket (Upgrade, Authorization: Bearer JWT) ─▶ cloud
//	cloud  ◀──────────────────────────────────────────── 101 Switching Protocols
//	host   ── hello {agent_version, config?, held, received: 0, credit,
//	                 raw_body_only?, binary_webhooks?} ───────────────────▶ cloud
//	cloud  ── welcome {heartbeat_interval_s, max_credit, now, lease_s} ───▶ host
//	cloud  ── webhooks {webhooks} ─────────────────────────────────────────▶ host  (within credit)
//	host   ── credit {received, credit} ──────────────────────────────────▶ cloud (more room)
//	host   ── report {id, acks, nacks, extends, results?, config?} ───────▶ cloud
//	cloud  ── confirm {id, now} ────────────────────────────────────────────▶ host  (applied, durable)
//	host   ── token {token} ──────────────────────────────────────────────▶ cloud (before expiry)
//
// The upgrade is authenticated exactly as a heartbeat: a refused one is
// answered as the heartbeat would be (401, 410, …) before any upgrade.
//
// Hello: what the host holds (Held: every webhook in flight, leased over any
// transport, and those whose outcome waits to be reported) and what it is: the cloud fails the attempt of the host's other
// leased deliveries, due again at once — they were lost with whatever
// carried them (a heartbeat's answer, a socket that died) — then sends
// Welcome and starts pushing.
//
// Binary webhooks: a host whose hello says binary_webhooks gets every
// webhooks frame as one binary message (AppendWebhooksFrame has the
// layout): the frame's JSON with each raw_body replaced by its length,
// then the bodies as they are — no base64 (a third more bytes, and the
// encoding and decoding of every body), and the host slices each body out
// of the message. A cloud that does not know the flag ignores it and sends
// text; a host that does not send it gets text. A binary frame that breaks
// its layout (lengths out of range or not adding up to the message,
// JSON that is no webhooks frame) closes the socket with CloseProtocol.
//
// Credit: the host says how many webhooks it can take. A credit frame reads
// "once you have pushed Received webhooks on this connection, push at most
// Credit more": the cloud never has more in flight on a connection than
// granted, and a credit frame that crosses a push in flight is not counted
// twice. Credit is capped at MaxSocketCredit; a lower credit takes back room
// not yet used.
//
// Report: acks, nacks and extends, applied durably in one transaction
// before the cloud answers Confirm with the report's ID; until then the
// host keeps them in its outbox (a report sent again is harmless). Config,
// when present, is the host's new subscription.
//
// Token: the host sends a fresh token before the one it connected with
// expires; the cloud closes the socket (CloseTokenExpired) when the last
// token it accepted expires, and at once (CloseRevoked) when the host is
// deactivated or re-claimed.
//
// One socket per host, across replicas: a new one closes the old
// (CloseReplaced), and is welcomed once the old one released what it
// pushed. What the cloud pushed on a socket and was not reported is
// due again at once when the cloud sees the socket close, or when its lease
// ends if it never does.
//
// A host that cannot upgrade (a proxy that strips Upgrade, a refused
// handshake) or whose socket dies goes back to heartbeats and tries the
// socket again later.

// PathSocket is the socket's path (GET with Upgrade: websocket).
const PathSocket = "/api/hosts/socket"

// Frame types.
const (
	FrameHello    = "hello"
	FrameWelcome  = "welcome"
	FrameWebhooks = "webhooks"
	FrameCredit   = "credit"
	FrameReport   = "report"
	FrameConfirm  = "confirm"
	FrameToken    = "token"
)

// Bounds of the socket.
const (
	// MaxSocketCredit caps the webhooks in flight on one socket.
	MaxSocketCredit = MaxMaxWebhooks
	// MaxSocketFrame is the largest frame the cloud reads (a report of
	// MaxReportItems ids, a subscription); larger closes the socket.
	MaxSocketFrame = 1 << 20
	// MaxReportItems bounds the acks, nacks and extends of one report, and
	// the held webhooks of a hello.
	MaxReportItems = 2 * MaxSocketCredit
	// SocketPingEvery is how often each side pings an idle socket: below
	// the idle timeouts of NATs and proxies (often 60 s).
	SocketPingEvery = 20 * time.Second
)

// WebSocket close codes of the protocol (4000–4999 are the application's).
const (
	CloseReplaced     = 4000 // a newer socket of the same host took over
	CloseUnauthorized = 4001 // a token frame was refused: fetch a new token and connect again
	CloseTokenExpired = 4002 // the last token accepted expired
	CloseRevoked      = 4010 // the host was deactivated or re-claimed
	CloseProtocol     = 4400 // a frame broke the protocol (the reason says how)
)

// Frame is every frame's envelope; Type says which fields it carries.
type Frame struct {
	Type string `json:"type"`

	// hello, report
	AgentVersion string        `json:"agent_version,omitempty"`
	Config       *Subscription `json:"config,omitempty"`
	// hello: every webhook the host holds in flight.
	Held []string `json:"held,omitempty"`
	// hello: RawBodyOnly as in HeartbeatRequest.
	RawBodyOnly bool `json:"raw_body_only,omitempty"`
	// hello: the host reads webhooks frames as binary messages
	// (AppendWebhooksFrame); without it, they come as JSON text.
	BinaryWebhooks bool `json:"binary_webhooks,omitempty"`

	// hello, credit
	Received int64 `json:"received,omitempty"`
	Credit   int   `json:"credit,omitempty"`

	// report, confirm
	ID      int64    `json:"id,omitempty"`
	Acks    []string `json:"acks,omitempty"`
	Nacks   []Nack   `json:"nacks,omitempty"`
	Extends []string `json:"extends,omitempty"`
	// report: what the host's ledger recorded of the runs it acks or nacks
	// (HeartbeatRequest.WebhookResults).
	Results []WebhookResult `json:"results,omitempty"`
	// report: the host is stopping; nothing more is pushed on this socket.
	// Every webhook pushed before comes ahead of the report's confirm, so
	// the host reads it and hands it back before it closes.
	Stopping bool `json:"stopping,omitempty"`

	// welcome
	HeartbeatIntervalS int `json:"heartbeat_interval_s,omitempty"`
	MaxCredit          int `json:"max_credit,omitempty"`
	// welcome, confirm: the cloud's time and the lease it grants, as in
	// HeartbeatResponse (Now, LeaseS).
	Now    time.Time `json:"now,omitzero"`
	LeaseS int       `json:"lease_s,omitempty"`

	// webhooks
	Webhooks []Webhook `json:"webhooks,omitempty"`

	// token
	Token string `json:"token,omitempty"`
}

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
	if decodeJSON == nil {
		decodeJSON = DecodeWebhooksJSON
	}
	hooks, lens, err := decodeJSON(msg[WebhooksFrameHeader : WebhooksFrameHeader+j])
	if err != nil {
		return nil, err
	}
	if err := AttachRawBodies(hooks, lens, msg[WebhooksFrameHeader+j:]); err != nil {
		return nil, err
	}
	return hooks, nil
}
