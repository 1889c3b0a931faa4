// Package verify checks that a webhook came from its provider: each provider
// scheme verifies the signature over the raw body with any of a source's
// secrets, and names the event (id for dedupe, type and action for filtering).
//
// The schemes follow the project's signatures spec to the letter; each one
// lives in its own file, and the building blocks they share (MACs, timestamp
// windows, header lists, body fields, option checks) in scheme.go.
package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"
	"time"
)

// Verification failures. Callers answer every one of them with the same 401
// and log the detail, so a sender learns nothing about which check failed.
// Returned errors wrap exactly one of these; their messages never contain a
// secret or an expected signature.
var (
	ErrMissingSignature = errors.New("signature header missing")
	ErrMalformed        = errors.New("signature header malformed")
	ErrMismatch         = errors.New("no secret matches the signature")
	ErrNoSecrets        = errors.New("source has no secrets configured")
	// ErrStale: the signature is right but its timestamp is too old or too
	// far in the future (a replay, or a badly skewed clock).
	ErrStale = errors.New("timestamp outside the allowed window")
	// ErrNoURL: the scheme signs the public URL (twilio) and the request
	// does not say what it was; RELAY_PUBLIC_URL must be set.
	ErrNoURL = errors.New("public URL unknown")
)

// Request is what a provider sees of an incoming webhook.
type Request struct {
	Header http.Header
	Body   []byte    // the raw bytes, exactly as received
	Now    time.Time // the clock for timestamp windows; zero means the wall clock
	// URL is the full public URL the provider posted to, with its query
	// string (twilio signs it); may be "".
	URL string
}

// now is the request's clock, the wall clock when none was injected.
func (r *Request) now() time.Time {
	if r.Now.IsZero() {
		return time.Now()
	}
	return r.Now
}

// Event names a webhook: ID is the provider's own id (dedupe key), or a
// hash of the body where the provider has none.
type Event struct {
	ID     string
	Type   string
	Action string
	// Note is what the provider says about this delivery that is worth
	// keeping in its audit trail, e.g. "slack retry 2 (http_timeout)".
	Note string
}

// Provider is one verification scheme.
type Provider interface {
	// Name is the scheme's canonical name, e.g. "github".
	Name() string
	// Verify returns nil when any of secrets verifies the request, else an
	// error wrapping one of the Err* values above.
	Verify(r *Request, secrets [][]byte, opts map[string]string) error
	// Event extracts the event's id, type and action from a verified request.
	Event(r *Request, opts map[string]string) Event
	// MaxBody is the default body limit for sources of this provider.
	MaxBody() int64
	// SuccessStatus is the status a queued webhook is answered with.
	SuccessStatus() int
	// Retries reports whether the provider retries a webhook answered non-2xx
	// (GitHub and Telegram do not; generic: assume it does).
	Retries() bool
	// Actions reports whether the provider's events carry an action beside
	// their type (GitHub's pull_request "opened"), which a filter names
	// after a dot ("pull_request.opened") and a type alone takes with every
	// action. Where they do not, a type is matched whole: Stripe's
	// "invoice.paid" is one type, which a filter entry "invoice" does not take.
	Actions() bool
}

// Reply is an answer a provider expects in place of the usual one.
type Reply struct {
	Status      int
	ContentType string // "" when Body is empty
	Body        []byte
}

// Handshaker answers provider handshakes in place, after verification, never
// queued: Slack url_verification, Discord PING. Handshake reports false for
// an ordinary event.
type Handshaker interface {
	Handshake(r *Request) (*Reply, bool)
}

// Acknowledger shapes the answer to a webhook that was stored, for providers
// that read it (Discord wants a deferred interaction response, Twilio TwiML).
// Ack reports false when the usual JSON answer will do.
type Acknowledger interface {
	Ack(r *Request) (*Reply, bool)
}

// SecretChecker validates a secret when an operator configures it. Errors
// say what is wrong and never echo the secret.
type SecretChecker interface {
	CheckSecret(secret []byte) error
}

// SecretHeaderer names the request headers that carry the source's secret
// itself (token schemes, where there is no signature): the relay checks them
// and then neither stores nor forwards them, so the secret stays in the
// cloud, encrypted.
type SecretHeaderer interface {
	SecretHeaders(opts map[string]string) []string
}

// SecretHeaders is the provider's secret-bearing headers, or none.
func SecretHeaders(p Provider, opts map[string]string) []string {
	if sh, ok := p.(SecretHeaderer); ok {
		return sh.SecretHeaders(opts)
	}
	return nil
}

// OptionsChecker validates a source's options (unknown names, bad values).
type OptionsChecker interface {
	CheckOptions(opts map[string]string) error
}

// DefaultMaxBody is the body limit unless a provider or source says otherwise.
const DefaultMaxBody = 1 << 20

var registry = map[string]Provider{}
var aliases = map[string]string{}

func register(p Provider, alias ...string) {
	registry[p.Name()] = p
	for _, a := range alias {
		aliases[a] = p.Name()
	}
}

// profile is what a scheme says of itself for the Provider interface: its
// name, its default body limit, the status a stored webhook is answered
// with, whether the provider retries and whether its events carry an
// action (Event sets one). Each scheme embeds its own.
type profile struct {
	name    string
	maxBody int64
	status  int
	retries bool
	actions bool
}

func (p profile) Name() string       { return p.name }
func (p profile) MaxBody() int64     { return p.maxBody }
func (p profile) SuccessStatus() int { return p.status }
func (p profile) Retries() bool      { return p.retries }
func (p profile) Actions() bool      { return p.actions }

func init() {
	// GitHub caps bodies at 25 MB; redelivery is manual only.
	register(github{profile{name: "github", maxBody: 25 << 20, status: 200, retries: false, actions: true}})
	register(stripe{profile{name: "stripe", maxBody: DefaultMaxBody, status: 200, retries: true}})
	// The Events API retries.
	register(slack{profile{name: "slack", maxBody: DefaultMaxBody, status: 200, retries: true, actions: true}})
	register(standard{profile{name: "standard", maxBody: DefaultMaxBody, status: 200, retries: true}}, "standard-webhooks", "svix")
	// Shopify retries 8 times over 4 hours.
	register(shopify{profile{name: "shopify", maxBody: DefaultMaxBody, status: 200, retries: true, actions: true}})
	// GitLab runs no retry schedule, it disables hooks that keep failing.
	register(gitlab{profile{name: "gitlab", maxBody: DefaultMaxBody, status: 200, retries: false, actions: true}})
	register(telegram{profile{name: "telegram", maxBody: DefaultMaxBody, status: 200, retries: false}})
	register(linear{profile{name: "linear", maxBody: DefaultMaxBody, status: 200, retries: true, actions: true}})
	// Vercel delivers at least once.
	register(vercel{profile{name: "vercel", maxBody: DefaultMaxBody, status: 200, retries: true}})
	// By default Twilio retries only failed connections, not answers.
	// A status callback's status is an action ("message" "delivered"); an
	// event stream's type is whole.
	register(twilio{profile{name: "twilio", maxBody: DefaultMaxBody, status: 200, retries: false, actions: true}})
	// Discord interactions are not retried.
	register(discord{profile{name: "discord", maxBody: DefaultMaxBody, status: 200, retries: false, actions: true}})
	// What a generic sender does is unknown: assume it retries.
	register(generic{profile{name: "generic", maxBody: DefaultMaxBody, status: 202, retries: true}})
}

// Lookup finds a provider by name or alias.
func Lookup(name string) (Provider, bool) {
	if canon, ok := aliases[name]; ok {
		name = canon
	}
	p, ok := registry[name]
	return p, ok
}

// Names lists the canonical provider names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// BodyHashID is the event id of a provider that sends none: the first 16 hex
// of sha256(body).
func BodyHashID(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}
