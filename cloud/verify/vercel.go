package verify

import (
	"crypto/sha1"
)

// vercel verifies x-vercel-signature: hex HMAC-SHA1 of the raw body, no
// prefix, keyed with the integration's client secret or the webhook's own
// secret. There is no timestamp.
//
// Event: id the body's id, type its type (deployment.succeeded…).
type vercel struct{ profile }

func (vercel) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	want, err := signature("x-vercel-signature", r.Header.Get("X-Vercel-Signature"), "hex", 20)
	if err != nil {
		return err
	}
	return matchBodyMAC(secrets, sha1.New, r.Body, want)
}

func (vercel) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	return Event{ID: idOrHash(f.str("id"), r.Body), Type: f.str("type")}
}

// SentHeaders: Vercel signs in one header.
func (vercel) SentHeaders(map[string]string) []string { return []string{"X-Vercel-Signature"} }

func (vercel) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("vercel", opts)
}
