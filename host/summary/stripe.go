package summary

import (
	"bytes"
	"encoding/json"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// stripePayload holds the fields read from a Stripe event.
type stripePayload struct {
	ID   json.RawMessage `json:"id"`
	Type json.RawMessage `json:"type"`
	Data struct {
		Object struct {
			ID       json.RawMessage `json:"id"`
			Object   json.RawMessage `json:"object"`
			Customer json.RawMessage `json:"customer"`
		} `json:"object"`
	} `json:"data"`
}

// The members stripePayload holds, object by object.
var (
	stripeTop    = []string{"id", "type", "data"}
	stripeData   = []string{"object"}
	stripeObject = []string{"id", "object", "customer"}
)

// decodeStripe fills p from a Stripe event as json.Unmarshal would, walking
// only the objects p reads, in one pass, as decodeGitHub does (and with its
// limits: what it does not walk it does not validate; a repeated name is
// read from its last occurrence). Decoding the whole event cost a quarter
// of the host's CPU for a Stripe delivery.
func decodeStripe(body []byte, p *stripePayload) bool {
	if isNull(bytes.TrimSpace(body)) {
		return true // decoding null changes nothing
	}
	var top [3][]byte
	var data [1][]byte
	var obj [3][]byte
	nested := func(k int, b []byte, i int) int {
		if k != 2 {
			return jsonwalk.End(b, i)
		}
		clear(obj[:])
		return within(b, i, stripeData, data[:], func(_ int, b []byte, i int) int {
			return within(b, i, stripeObject, obj[:], nil)
		})
	}
	if end := jsonwalk.FieldsAt(body, skipSpace(body), stripeTop, top[:], nested); end < 0 || len(bytes.TrimSpace(body[end:])) > 0 {
		return false
	}
	p.ID, p.Type = raw(top[0]), raw(top[1])
	if _, ok := object(top[2]); !ok {
		return false
	}
	if _, ok := object(data[0]); !ok {
		return false
	}
	o := &p.Data.Object
	o.ID, o.Object, o.Customer = raw(obj[0]), raw(obj[1]), raw(obj[2])
	return true
}
