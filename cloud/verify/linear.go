package verify

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// linear verifies Linear-Signature: hex HMAC-SHA256 of the raw body, no
// prefix. Freshness: the body's webhookTimestamp and the Linear-Timestamp
// header are milliseconds since the epoch and must be within 60 s of now
// either way. The header is not signed, so it alone cannot vouch for a
// request: the signed body field is checked whenever present, and the header
// too when sent; one of them must be.
//
// Event: id Linear-Delivery, type the body's type (Issue, Comment…; else
// Linear-Event), action its action (create, update, remove).
type linear struct{ profile }

const linearTolerance = 60 * time.Second

func (linear) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	want, err := signature("Linear-Signature", r.Header.Get("Linear-Signature"), "hex", 32)
	if err != nil {
		return err
	}
	if err := matchBodyMAC(secrets, sha256.New, r.Body, want); err != nil {
		return err
	}
	checked := false
	for _, stamp := range []struct{ where, value string }{
		{"body webhookTimestamp", jsonObject(r.Body).str("webhookTimestamp")},
		{"Linear-Timestamp", r.Header.Get("Linear-Timestamp")},
	} {
		if stamp.value == "" {
			continue
		}
		ms, ok := parseDigits(stamp.value)
		if !ok {
			return fmt.Errorf("%s is not epoch milliseconds: %w", stamp.where, ErrMalformed)
		}
		if err := checkWindow(r.now(), time.UnixMilli(ms), linearTolerance); err != nil {
			return fmt.Errorf("%s: %w", stamp.where, err)
		}
		checked = true
	}
	if !checked {
		return fmt.Errorf("no webhookTimestamp in the body nor Linear-Timestamp: %w", ErrMalformed)
	}
	return nil
}

func (linear) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	return Event{
		ID:     idOrHash(r.Header.Get("Linear-Delivery"), r.Body),
		Type:   firstOf(f.str("type"), r.Header.Get("Linear-Event")),
		Action: f.str("action"),
	}
}

// SentHeaders: Linear's signature, delivery, event and timestamp headers.
func (linear) SentHeaders(map[string]string) []string {
	return []string{"Linear-Signature", "Linear-Delivery", "Linear-Event", "Linear-Timestamp"}
}

func (linear) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("linear", opts)
}
