package verify

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// github verifies X-Hub-Signature-256 (HMAC-SHA256 of the raw body, "sha256="
// + lower hex). The legacy X-Hub-Signature (sha1) counts only when the sha256
// header is absent and the source opts in with option allow_sha1=true: a
// correct sha1 never rescues a wrong sha256.
type github struct{}

func (github) Name() string       { return "github" }
func (github) MaxBody() int64     { return 25 << 20 } // GitHub's own cap
func (github) SuccessStatus() int { return 200 }

func (github) Verify(r *Request, secrets [][]byte, opts map[string]string) error {
	if sig := r.Header.Get("X-Hub-Signature-256"); sig != "" {
		want, err := prefixedHex(sig, "sha256=", 32)
		if err != nil {
			return err
		}
		return anySecret(secrets, func(s []byte) bool { return hmac.Equal(hmacSHA256(s, r.Body), want) })
	}
	if sig := r.Header.Get("X-Hub-Signature"); sig != "" && opts["allow_sha1"] == "true" {
		want, err := prefixedHex(sig, "sha1=", 20)
		if err != nil {
			return err
		}
		return anySecret(secrets, func(s []byte) bool {
			m := hmac.New(sha1.New, s)
			m.Write(r.Body)
			return hmac.Equal(m.Sum(nil), want)
		})
	}
	return ErrMissingSignature
}

func prefixedHex(sig, prefix string, size int) ([]byte, error) {
	hexed, ok := strings.CutPrefix(sig, prefix)
	if !ok || len(hexed) != 2*size {
		return nil, ErrMalformed
	}
	b, err := hex.DecodeString(hexed)
	if err != nil {
		return nil, ErrMalformed
	}
	return b, nil
}

func (github) Event(r *Request, _ map[string]string) Event {
	e := Event{ID: r.Header.Get("X-GitHub-Delivery"), Type: r.Header.Get("X-GitHub-Event")}
	if f := jsonFields(r.Body, r.Header.Get("Content-Type")); f != nil {
		e.Action = str(f, "action")
	}
	if e.ID == "" {
		e.ID = BodyHashID(r.Body)
	}
	return e
}
