package verify

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// standard verifies Standard Webhooks: webhook-signature holds a
// space-separated list of "version,value" entries, each v1 value the base64
// HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}" keyed with the
// base64-decoded secret ("whsec_…"). Any v1 entry matching any secret is
// enough (senders sign with old and new keys while rotating); other versions
// are skipped. The timestamp must be within 5 minutes either way. Svix sends
// the same headers named svix-*.
//
// Event: id webhook-id (stable across retries), type the body's "type".
type standard struct{ profile }

const standardTolerance = 5 * time.Minute

func (standard) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	return verifyStandard(r, standardHeadersOf(r.Header), secrets)
}

func (standard) Event(r *Request, _ map[string]string) Event {
	return Event{
		ID:   idOrHash(standardHeadersOf(r.Header).id, r.Body),
		Type: jsonObject(r.Body).str("type"),
	}
}

func (standard) CheckSecret(secret []byte) error {
	rest, ok := strings.CutPrefix(string(secret), "whsec_")
	if !ok {
		return fmt.Errorf("a Standard Webhooks secret starts with whsec_")
	}
	return checkStandardKey(rest)
}

// SentHeaders: the three Standard Webhooks headers, under either prefix.
func (standard) SentHeaders(map[string]string) []string { return standardSent }

var standardSent = []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Svix-Id", "Svix-Timestamp", "Svix-Signature"}

func (standard) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("standard", opts)
}

// standardHeaders are the three headers of a Standard Webhooks request.
type standardHeaders struct{ id, timestamp, signature string }

// standardHeadersOf reads the svix-* set when the request carries a
// svix-signature, else the webhook-* set.
func standardHeadersOf(h http.Header) standardHeaders {
	prefix := "Webhook-"
	if h.Get("Svix-Signature") != "" {
		prefix = "Svix-"
	}
	return standardHeaders{
		id:        h.Get(prefix + "Id"),
		timestamp: h.Get(prefix + "Timestamp"),
		signature: h.Get(prefix + "Signature"),
	}
}

// verifyStandard checks a Standard Webhooks signature; gitlab's signing token
// uses it too.
func verifyStandard(r *Request, h standardHeaders, secrets [][]byte) error {
	if h.signature == "" {
		return ErrMissingSignature
	}
	if h.id == "" || h.timestamp == "" {
		return fmt.Errorf("webhook-id or webhook-timestamp absent: %w", ErrMissingSignature)
	}
	ts, ok := parseUnix(h.timestamp)
	if !ok {
		return fmt.Errorf("webhook-timestamp is not Unix seconds: %w", ErrMalformed)
	}
	var sigs [][]byte
	for _, it := range listItems(h.signature, ' ', ',') {
		if it.key != "v1" {
			continue
		}
		if sig, ok := decodeBase64(it.value, 32); ok {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return fmt.Errorf("webhook-signature has no usable v1 entry: %w", ErrMalformed)
	}
	signed := [][]byte{[]byte(h.id), []byte("."), []byte(h.timestamp), []byte("."), r.Body}
	err := anySecret(secrets, func(s []byte) bool {
		key, ok := standardKey(s)
		return ok && equalAny(hmacSHA256(key, signed...), sigs)
	})
	if err != nil {
		return err
	}
	return checkWindow(r.now(), ts, standardTolerance)
}

// standardKey is the HMAC key of a Standard Webhooks secret: the base64
// after an optional whsec_ prefix, padding optional. A secret that is not
// base64 yields no key (it never matches).
func standardKey(secret []byte) ([]byte, bool) {
	s := strings.TrimPrefix(string(secret), "whsec_")
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(key) == 0 {
		return nil, false
	}
	return key, true
}

// checkStandardKey validates the base64 part of a whsec_ secret.
func checkStandardKey(b64 string) error {
	if _, err := base64.StdEncoding.Strict().DecodeString(b64); err != nil {
		if _, err := base64.RawStdEncoding.Strict().DecodeString(b64); err != nil {
			return fmt.Errorf("the part after whsec_ is not valid base64")
		}
	}
	key, _ := standardKey([]byte(b64))
	if n := len(key); n < 24 || n > 64 {
		return fmt.Errorf("the secret decodes to %d bytes; Standard Webhooks secrets are 24 to 64 bytes", n)
	}
	return nil
}
