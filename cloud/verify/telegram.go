package verify

import (
	"fmt"
	"sort"
)

// telegram verifies X-Telegram-Bot-Api-Secret-Token: Telegram echoes the
// secret_token given to setWebhook, compared in constant time. The body is
// not authenticated.
//
// Event: id the body's update_id; type the kind of update (the one field
// besides update_id: message, edited_message, callback_query…).
type telegram struct{ profile }

func (telegram) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	token := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
	if token == "" {
		return ErrMissingSignature
	}
	return matchToken(secrets, token)
}

func (telegram) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	kinds := make([]string, 0, 1)
	for k := range f {
		if k != "update_id" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	e := Event{ID: idOrHash(f.str("update_id"), r.Body)}
	if len(kinds) > 0 {
		e.Type = kinds[0]
	}
	return e
}

// CheckSecret applies setWebhook's rule: 1 to 256 of A-Z, a-z, 0-9, _ and -.
func (telegram) CheckSecret(secret []byte) error {
	if len(secret) == 0 || len(secret) > 256 {
		return fmt.Errorf("a Telegram secret token is 1 to 256 characters, not %d", len(secret))
	}
	for _, c := range secret {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("a Telegram secret token has only A-Z, a-z, 0-9, _ and -")
		}
	}
	return nil
}

// SentHeaders: Telegram sends only its secret token (never kept) besides
// the generic headers.
func (telegram) SentHeaders(map[string]string) []string { return nil }

func (telegram) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("telegram", opts)
}

// SecretHeaders: the secret token is echoed verbatim.
func (telegram) SecretHeaders(map[string]string) []string {
	return []string{"X-Telegram-Bot-Api-Secret-Token"}
}
