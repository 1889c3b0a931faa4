package verify

import (
	"crypto/sha1"
	"crypto/sha256"
)

// github verifies X-Hub-Signature-256 (HMAC-SHA256 of the raw body, "sha256="
// + hex). The legacy X-Hub-Signature (sha1) counts only when the sha256
// header is absent and the source opts in with option allow_sha1=true: a
// correct sha1 never rescues a wrong sha256.
//
// Event: id X-GitHub-Delivery (kept on redelivery), type X-GitHub-Event,
// action the body's "action" (JSON, or the "payload" field of a form body).
type github struct{ profile }

func (github) Verify(r *Request, secrets [][]byte, opts map[string]string) error {
	// Present at all, the sha256 header decides, even when empty.
	if sigs := r.Header.Values("X-Hub-Signature-256"); len(sigs) > 0 {
		want, err := prefixedHex(sigs[0], "sha256=", 32)
		if err != nil {
			return err
		}
		return matchBodyMAC(secrets, sha256.New, r.Body, want)
	}
	if sig := r.Header.Get("X-Hub-Signature"); sig != "" && opts["allow_sha1"] == "true" {
		want, err := prefixedHex(sig, "sha1=", 20)
		if err != nil {
			return err
		}
		return matchBodyMAC(secrets, sha1.New, r.Body, want)
	}
	return ErrMissingSignature
}

func (github) Event(r *Request, _ map[string]string) Event {
	return Event{
		ID:     idOrHash(r.Header.Get("X-GitHub-Delivery"), r.Body),
		Type:   r.Header.Get("X-GitHub-Event"),
		Action: bodyAction(r),
	}
}

// SentHeaders: GitHub's documented delivery headers.
func (github) SentHeaders(map[string]string) []string {
	return []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID", "X-GitHub-Hook-Installation-Target-*",
		"X-GitHub-Enterprise-Version", "X-GitHub-Enterprise-Host", "X-Hub-Signature", "X-Hub-Signature-256"}
}

func (github) CheckOptions(opts map[string]string) error {
	return optionSpec{"allow_sha1": oneOf("true", "false")}.check("github", opts)
}
