package verify

import (
	"fmt"
	"time"
)

// stripe verifies Stripe-Signature: "t=<unix>,v1=<hex>[,v1=<hex>…]", each v1
// the HMAC-SHA256 of "{t}.{body}" keyed with the endpoint secret exactly as
// shown ("whsec_…" as UTF-8 bytes, not decoded). Any v1 matching any secret
// is enough (Stripe signs with every active secret while one is rolled);
// other schemes (v0) are ignored and unparseable v1 values skipped. The
// timestamp must be within 5 minutes either way (Stripe's SDKs only check
// staleness; we also refuse the future).
//
// Event: id the body's "id" (evt_…), type its "type" (e.g. invoice.paid).
type stripe struct{ profile }

const stripeTolerance = 5 * time.Minute

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	timestamp string // as sent: the signed string uses it verbatim
	t         time.Time
	v1        [][]byte
}

// parseStripeSignature parses a Stripe-Signature header. It needs exactly
// one t and at least one well-formed v1.
func parseStripeSignature(header string) (*stripeSignature, error) {
	var sig stripeSignature
	for _, it := range listItems(header, ',', '=') {
		switch it.key {
		case "t":
			if sig.timestamp != "" {
				return nil, fmt.Errorf("Stripe-Signature has more than one t: %w", ErrMalformed)
			}
			t, ok := parseUnix(it.value)
			if !ok {
				return nil, fmt.Errorf("Stripe-Signature t is not Unix seconds: %w", ErrMalformed)
			}
			sig.timestamp, sig.t = it.value, t
		case "v1":
			if b, ok := decodeHex(it.value, 32); ok {
				sig.v1 = append(sig.v1, b)
			}
		}
	}
	if sig.timestamp == "" {
		return nil, fmt.Errorf("Stripe-Signature has no t: %w", ErrMalformed)
	}
	if len(sig.v1) == 0 {
		return nil, fmt.Errorf("Stripe-Signature has no usable v1: %w", ErrMalformed)
	}
	return &sig, nil
}

func (stripe) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	header := r.Header.Get("Stripe-Signature")
	if header == "" {
		return ErrMissingSignature
	}
	sig, err := parseStripeSignature(header)
	if err != nil {
		return err
	}
	err = anySecret(secrets, func(s []byte) bool {
		return equalAny(hmacSHA256(s, []byte(sig.timestamp), []byte("."), r.Body), sig.v1)
	})
	if err != nil {
		return err
	}
	return checkWindow(r.now(), sig.t, stripeTolerance)
}

func (stripe) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	return Event{ID: idOrHash(f.str("id"), r.Body), Type: f.str("type")}
}

// SentHeaders: Stripe signs in one header.
func (stripe) SentHeaders(map[string]string) []string { return []string{"Stripe-Signature"} }

func (stripe) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("stripe", opts)
}
