package verify

import "strings"

// gitlab verifies either of GitLab's schemes:
//   - the newer signing token: when webhook-signature is present and the
//     source has a signing token (a "whsec_…" secret), the request is checked
//     as Standard Webhooks (see standard), and the plain token is not looked
//     at;
//   - the classic secret token: X-Gitlab-Token carries a secret verbatim,
//     compared in constant time. The body is not authenticated.
//
// Event: id Idempotency-Key (GitLab 17.4+, the same across retries and
// re-sends), else X-Gitlab-Event-UUID; type the body's object_kind (push,
// merge_request…; X-Gitlab-Event when absent), action
// object_attributes.action (open, merge…).
type gitlab struct{ profile }

func (gitlab) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	if len(secrets) == 0 {
		return ErrNoSecrets // before choosing a scheme by the secrets
	}
	if sw := standardHeadersOf(r.Header); sw.signature != "" && hasSigningToken(secrets) {
		return verifyStandard(r, sw, secrets)
	}
	token := r.Header.Get("X-Gitlab-Token")
	if token == "" {
		return ErrMissingSignature
	}
	return matchToken(secrets, token)
}

// SecretHeaders: the classic token is the secret itself.
func (gitlab) SecretHeaders(map[string]string) []string { return []string{"X-Gitlab-Token"} }

// hasSigningToken reports whether any secret is a signing token.
func hasSigningToken(secrets [][]byte) bool {
	for _, s := range secrets {
		if strings.HasPrefix(string(s), "whsec_") {
			return true
		}
	}
	return false
}

func (gitlab) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	id := firstOf(r.Header.Get("Idempotency-Key"), r.Header.Get("X-Gitlab-Event-UUID"))
	return Event{
		ID:     idOrHash(id, r.Body),
		Type:   firstOf(f.str("object_kind"), f.str("event_name"), r.Header.Get("X-Gitlab-Event")),
		Action: f.str("object_attributes", "action"),
	}
}

// CheckSecret validates a signing token's base64; a classic token may be
// anything.
func (gitlab) CheckSecret(secret []byte) error {
	if rest, ok := strings.CutPrefix(string(secret), "whsec_"); ok {
		return checkStandardKey(rest)
	}
	return nil
}

// SentHeaders: GitLab's event, UUID and instance headers, the idempotency
// key and a signing token's Standard Webhooks headers. X-Gitlab-Token is the
// secret itself: never kept (SecretHeaders).
func (gitlab) SentHeaders(map[string]string) []string {
	return append([]string{"X-Gitlab-Event", "X-Gitlab-Event-UUID", "X-Gitlab-Webhook-UUID", "X-Gitlab-Instance",
		"Idempotency-Key"}, standardSent[:3]...)
}

func (gitlab) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("gitlab", opts)
}
