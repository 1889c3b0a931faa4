package shared

import "time"

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
	// MaxSocketFrame is the largest frame the cloud reads (a report, a
	// subscription); larger closes the socket. What a report or a hello
	// lists is bounded by MaxReportItems, as a heartbeat's is.
	MaxSocketFrame = 1 << 20
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
