// Package verify checks that a webhook came from its provider: each provider
// scheme verifies the signature over the raw body with any of a source's
// secrets, and names the event (id for dedupe, type and action for filtering).
package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Verification failures. Callers answer every one of them with the same 401
// and log the detail, so a sender learns nothing about which check failed.
var (
	ErrMissingSignature = errors.New("signature header missing")
	ErrMalformed        = errors.New("signature header malformed")
	ErrMismatch         = errors.New("no secret matches the signature")
	ErrNoSecrets        = errors.New("source has no secrets configured")
)

// Request is what a provider sees of an incoming webhook.
type Request struct {
	Header http.Header
	Body   []byte // the raw bytes, exactly as received
	Now    time.Time
}

// Event names a webhook: EventID is the provider's own id (dedupe key), or a
// hash of the body where the provider has none.
type Event struct {
	ID     string
	Type   string
	Action string
}

// Provider is one verification scheme.
type Provider interface {
	// Name is the scheme's canonical name, e.g. "github".
	Name() string
	// Verify returns nil when any of secrets verifies the request, else one
	// of the Err* values above (possibly wrapped).
	Verify(r *Request, secrets [][]byte, opts map[string]string) error
	// Event extracts the event's id, type and action from a verified request.
	Event(r *Request, opts map[string]string) Event
	// MaxBody is the default body limit for sources of this provider.
	MaxBody() int64
	// SuccessStatus is the status a queued webhook is answered with.
	SuccessStatus() int
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

func init() {
	register(github{})
	register(generic{})
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

// hmacSHA256 computes HMAC-SHA256(key, parts...).
func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// anySecret reports whether check accepts any secret, trying every one so
// the time taken does not depend on which matched.
func anySecret(secrets [][]byte, check func(secret []byte) bool) error {
	if len(secrets) == 0 {
		return ErrNoSecrets
	}
	ok := false
	for _, s := range secrets {
		if check(s) {
			ok = true
		}
	}
	if !ok {
		return ErrMismatch
	}
	return nil
}

// jsonFields decodes the named top-level string fields of a JSON body (or of
// a form body's "payload" parameter, as GitHub sends with content type form).
// Non-JSON bodies yield nothing.
func jsonFields(body []byte, contentType string) map[string]json.RawMessage {
	b := body
	if strings.HasPrefix(contentType, "application/x-www-form-urlencoded") {
		v, err := url.ParseQuery(string(body))
		if err != nil || v.Get("payload") == "" {
			return nil
		}
		b = []byte(v.Get("payload"))
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// str returns a field as a string (strings verbatim, numbers as written).
func str(m map[string]json.RawMessage, key string) string {
	raw, ok := m[key]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}
