// Package shared is the wire protocol between the cloud and its hosts: the JSON
// shapes both binaries speak and the constants they must agree on. It imports
// no database or HTTP framework.
//
// The protocol, seen from a host behind NAT that can only dial out:
//
//	admin  ── POST /api/hosts ──────────────▶ cloud   (one-time claim code)
//	host   ── POST /api/hosts/claim ────────▶ cloud   (code → credential + JWT)
//	host   ── POST /api/hosts/token ────────▶ cloud   (credential → fresh JWT)
//	host   ── POST /api/hosts/heartbeat ────▶ cloud   (acks, nacks, extends)
//	cloud  ◀──────────────── 200 {webhooks} ──        (new work, leased)
//
// The heartbeat's answer is JSON (bodies base64), or, when the host's
// Accept lists MediaTypeWebhooksBinary, the binary layout of a socket's
// webhooks frame (AppendHeartbeatAnswer: bodies as they are).
//
// A host runs each leased webhook's handler at most once per its local ledger,
// and reports the outcome in the acks or nacks of its next heartbeat. Work that
// is not acked before its lease ends is handed out again.
//
// A report — the acks, nacks and extends of a heartbeat, or of a socket's
// report frame (socket.go), with the results of the runs it acks or nacks
// — lists at most MaxReportItems (5,000) of them together, and a host
// says it holds at most as many webhooks (a heartbeat's webhooks_held, a
// hello's held). Both transports are checked by the same rules
// (HeartbeatRequest.Validate, Frame.Validate, in report.go); the cloud
// refuses a report that breaks them whole.
package shared

import (
	"encoding/json"
	"time"
)

// Paths of the cloud's HTTP API.
const (
	PathHosts     = "/api/hosts"
	PathClaim     = "/api/hosts/claim"
	PathToken     = "/api/hosts/token"
	PathHeartbeat = "/api/hosts/heartbeat"
	PathWebhooks  = "/api/webhooks" // + /:hostId/:source
)

// PathHostDeliveries is the cloud's record of the calling host's own
// deliveries (GET, with the host's token), for reconciliation.
const PathHostDeliveries = "/api/hosts/deliveries"

// TokenAudience is the "aud" claim of every host token.
const TokenAudience = "relay-host"

// Headers the host adds when it forwards a webhook to a local handler.
const (
	HeaderDeliveryID     = "X-Relay-Delivery-Id"
	HeaderSource         = "X-Relay-Source"
	HeaderAttempt        = "X-Relay-Attempt"
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayOf names, on a replay (a new delivery an operator made
	// of a stored one), the delivery it replays. The cloud stores it among
	// the delivery's headers (lower-cased) and drops any a sender sent, so
	// only a replay has it; the host forwards it as it forwards the
	// provider's headers, and gives an exec program RELAY_REPLAY_OF.
	HeaderReplayOf = "X-Relay-Replay-Of"
	// HeaderGroup names, on a group's webhook, the group whose URL took
	// it. Stored and forwarded as HeaderReplayOf is (a sender's own is
	// dropped); an exec program gets RELAY_GROUP.
	HeaderGroup = "X-Relay-Group"
)

// Intake statuses answered to a provider.
const (
	IntakeQueued    = "queued"
	IntakeDuplicate = "duplicate"
	IntakeFiltered  = "filtered"
)

// ErrorResponse is the body of every error answer: {"error": {"code", "message"}}.
type ErrorResponse struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong. Code is stable and machine-readable; Message
// is for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes used in ErrorDetail.Code. HTTPStatus gives each one's status.
const (
	CodeInvalid          = "invalid"            // 400: malformed request
	CodeUnauthorized     = "unauthorized"       // 401: missing or bad credentials or signature
	CodeNotFound         = "not_found"          // 404
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeConflict         = "conflict"           // 409
	CodeForbidden        = "forbidden"          // 403: the sender's address is not in the source's allowlist
	CodeGone             = "gone"               // 410: host deactivated
	CodeTooLarge         = "too_large"          // 413: body over the source's limit
	CodeMisdirected      = "misdirected"        // 421: the host's local API asked under a name it does not answer
	CodeRateLimited      = "rate_limited"       // 429: over the host's rate limit; see Retry-After
	CodeCanceled         = "canceled"           // 499: the client went away (logged, rarely seen)
	CodeInternal         = "internal"           // 500
	CodeNotImplemented   = "not_implemented"    // 501: feature not configured (admin API without a token)
	CodeUnavailable      = "unavailable"        // 503: storage down; the sender should retry
)

// codeStatus is the one table of error codes to HTTP statuses, for the
// cloud's API and the host's local API alike.
var codeStatus = map[string]int{
	CodeInvalid:          400,
	CodeUnauthorized:     401,
	CodeForbidden:        403,
	CodeNotFound:         404,
	CodeMethodNotAllowed: 405,
	CodeConflict:         409,
	CodeGone:             410,
	CodeTooLarge:         413,
	CodeMisdirected:      421,
	CodeRateLimited:      429,
	CodeCanceled:         499,
	CodeInternal:         500,
	CodeNotImplemented:   501,
	CodeUnavailable:      503,
}

// HTTPStatus is the HTTP status an error with code is answered with; an
// unknown code is an internal error (500).
func HTTPStatus(code string) int {
	if st, ok := codeStatus[code]; ok {
		return st
	}
	return 500
}

// IntakeResponse answers a provider's webhook.
type IntakeResponse struct {
	DeliveryID string `json:"delivery_id,omitempty"`
	Status     string `json:"status"`
}

// CreateHostRequest is the admin's request to register a host.
type CreateHostRequest struct {
	Name string `json:"name"`
}

// CreateHostResponse carries the one-time claim code for a new host.
type CreateHostResponse struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	ClaimCode      string    `json:"claim_code"`
	ClaimExpiresAt time.Time `json:"claim_expires_at"`
}

// ClaimRequest exchanges a claim code for a host credential.
type ClaimRequest struct {
	ClaimCode    string `json:"claim_code"`
	AgentVersion string `json:"agent_version"`
}

// ClaimResponse is shown once: the cloud keeps only a hash of HostCredential.
type ClaimResponse struct {
	HostID             string    `json:"host_id"`
	HostCredential     string    `json:"host_credential"`
	Token              string    `json:"token"`
	TokenExpiresAt     time.Time `json:"token_expires_at"`
	HeartbeatIntervalS int       `json:"heartbeat_interval_s"`
}

// TokenRequest exchanges a host credential for a fresh token.
type TokenRequest struct {
	HostID         string `json:"host_id"`
	HostCredential string `json:"host_credential"`
}

// TokenResponse carries a short-lived host token (JWT).
type TokenResponse struct {
	Token          string    `json:"token"`
	TokenExpiresAt time.Time `json:"token_expires_at"`
	// Now is the cloud's time when it answered: a host measures the token's
	// lifetime as TokenExpiresAt-Now, both on the cloud's clock, whatever
	// its own clock says (zero from a cloud that predates it).
	Now time.Time `json:"now"`
}

// HeartbeatRequest is sent by a host, authenticated by its token. Acks, nacks
// and extends are applied before new work is leased.
type HeartbeatRequest struct {
	AgentVersion   string   `json:"agent_version,omitempty"`
	WebhookAcks    []string `json:"webhook_acks,omitempty"`
	WebhookNacks   []Nack   `json:"webhook_nacks,omitempty"`
	WebhookExtends []string `json:"webhook_extends,omitempty"`
	// MaxWebhooks bounds the batch: absent means DefaultMaxWebhooks, 0 leases
	// nothing (a host whose workers are all busy, or that is stopping, only
	// reports), and anything above MaxMaxWebhooks is capped.
	MaxWebhooks *int          `json:"max_webhooks,omitempty"`
	WaitS       int           `json:"wait_s,omitempty"`
	Config      *Subscription `json:"config,omitempty"`
	// RawBodyOnly leaves Webhook.Body (the parsed copy) out of the answer:
	// a host that reads RawBody alone halves what a batch costs to encode,
	// send and decode.
	RawBodyOnly bool `json:"raw_body_only,omitempty"`
	// AnswerLost says the host did not get the answer to its last heartbeat
	// (the connection failed, or the answer was cut short), so it may not
	// hold what that answer leased. WebhooksHeld then lists every webhook it
	// holds and has not reported: the cloud fails the attempt of the host's
	// other leased deliveries, due again at once, instead of waiting for
	// their leases to end.
	AnswerLost   bool     `json:"answer_lost,omitempty"`
	WebhooksHeld []string `json:"webhooks_held,omitempty"`
	// WebhookResults (optional) say what the host's ledger recorded of the
	// runs this heartbeat acks or nacks, for the operator's inspect; a
	// result of a webhook not acked or nacked in the same heartbeat is
	// ignored.
	WebhookResults []WebhookResult `json:"webhook_results,omitempty"`
	// Stopping says the host is stopping: the cloud answers the host's
	// heartbeats it holds (long polls) at once, with what was already
	// leased to them and nothing more, so the host reads their answers
	// (and hands back what they carry) instead of hanging up on them. It
	// goes with MaxWebhooks 0 and no WaitS.
	Stopping bool `json:"stopping,omitempty"`
}

// WebhookResult is the host ledger's record of one handler run.
type WebhookResult struct {
	DeliveryID     string `json:"delivery_id"`
	Attempt        int    `json:"attempt,omitempty"` // the cloud's attempt the run was
	Result         string `json:"result"`            // success, error or skipped
	Handler        string `json:"handler,omitempty"`
	ResponseStatus *int   `json:"response_status,omitempty"` // forward: the target's HTTP status
	ExitCode       *int   `json:"exit_code,omitempty"`       // exec: the program's exit code
	DurationMS     int64  `json:"duration_ms"`
	Error          string `json:"error,omitempty"`
}

// Nack reports a failed handler run, or a webhook handed back unstarted
// (NotStarted).
type Nack struct {
	DeliveryID string `json:"delivery_id"`
	Error      string `json:"error"`
	Retryable  bool   `json:"retryable"`
	// Attempt is the webhook's attempt the nack reports (optional). A nack
	// for an attempt other than the delivery's current one — sent late,
	// after the lease expired and the webhook was handed out again — changes
	// nothing: that attempt was already counted.
	Attempt int `json:"attempt,omitempty"`
	// NotStarted says the handler never started: the host hands the
	// webhook back (it is stopping). The cloud makes it due again at once
	// and gives the attempt back, up to a ceiling on the delivery's
	// attempts; past it, or from a cloud that predates the field, it is an
	// ordinary nack.
	NotStarted bool `json:"not_started,omitempty"`
}

// Subscription is the host's own view of what it wants: sources and, per
// source, event types. An empty Events list means every event.
type Subscription struct {
	Webhooks map[string]SourceSubscription `json:"webhooks"`
}

// SourceSubscription is one source in a Subscription.
type SourceSubscription struct {
	Enabled bool     `json:"enabled"`
	Events  []string `json:"events,omitempty"`
}

// HeartbeatResponse hands out leased work: encoded by encoding/json, or,
// for a host that accepts MediaTypeWebhooksBinary, by
// AppendHeartbeatAnswer with the same members and omissions.
type HeartbeatResponse struct {
	Status             string    `json:"status"`
	HeartbeatIntervalS int       `json:"heartbeat_interval_s"`
	More               bool      `json:"more"`
	Webhooks           []Webhook `json:"webhooks"`
	// Now is the cloud's time when it answered. The cloud's times (leases,
	// retries, audit) are the truth; a host whose own clock is off learns
	// the difference from it (zero from a cloud that predates it).
	Now time.Time `json:"now"`
	// LeaseS is how long, in seconds, the leases this answer granted or
	// extended last from Now: a host extends what it runs well within it,
	// timing that on its own monotonic clock (0: not said).
	LeaseS int `json:"lease_s,omitempty"`
	// PollWhileBusy says this cloud holds a host's long poll while the
	// host's handlers run and takes its outcomes meanwhile in heartbeats
	// of their own (max_webhooks 0, no wait_s): a host may keep one poll
	// out at all times (false: a cloud that predates it).
	PollWhileBusy bool `json:"poll_while_busy,omitempty"`
}

// Webhook is one leased delivery. RawBody is the truth (base64 of the exact
// bytes the provider sent); Body is the parsed JSON, when the payload is JSON,
// for convenience.
type Webhook struct {
	DeliveryID    string            `json:"delivery_id"`
	Source        string            `json:"source"`
	EventType     string            `json:"event_type"`
	EventAction   string            `json:"event_action"`
	Headers       map[string]string `json:"headers"`
	Body          json.RawMessage   `json:"body,omitempty"`
	RawBody       []byte            `json:"raw_body"`
	ReceivedAt    time.Time         `json:"received_at"`
	Attempt       int               `json:"attempt"`
	CorrelationID string            `json:"correlation_id"`
}

// Ptr returns a pointer to v, for optional fields such as MaxWebhooks.
func Ptr[T any](v T) *T { return &v }

// Limits on a heartbeat batch.
const (
	DefaultMaxWebhooks = 100
	MaxMaxWebhooks     = 500
)

// EventWanted is the one rule, on the cloud and on the host, for whether an
// event passes a source's list of wanted events: an empty list wants every
// event; an entry matches the event type ("push"), the type and action
// ("pull_request.opened"), or anything ("*").
func EventWanted(events []string, eventType, action string) bool {
	if len(events) == 0 {
		return true
	}
	for _, e := range events {
		if e == "*" || e == eventType || (action != "" && e == eventType+"."+action) {
			return true
		}
	}
	return false
}

// HostDelivery is the cloud's record of one of a host's deliveries, as GET
// PathHostDeliveries answers it.
type HostDelivery struct {
	DeliveryID  string     `json:"delivery_id"`
	Source      string     `json:"source"`
	Status      string     `json:"status"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	LastError   string     `json:"last_error"`
	ReceivedAt  time.Time  `json:"received_at"`
	AckedAt     *time.Time `json:"acked_at"`
	DLQAt       *time.Time `json:"dlq_at"`
}

// HostDeliveriesResponse is one page of a host's deliveries, newest first;
// NextCursor is empty on the last page.
type HostDeliveriesResponse struct {
	Webhooks   []HostDelivery `json:"webhooks"`
	NextCursor string         `json:"next_cursor"`
}
