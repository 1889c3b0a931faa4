package verify

import (
	"crypto/sha256"
	"net/http"
	"strings"
)

// shopify verifies X-Shopify-Hmac-Sha256: the standard base64 (not hex) of
// HMAC-SHA256 of the raw body, keyed with the app's client secret (or, for
// webhooks made by hand in the store admin, the key shown there). Newer event
// deliveries send the same headers without the X- prefix; both are read.
// There is no timestamp in the MAC.
//
// Event: id X-Shopify-Event-Id (Shopify's duplicate detector), else
// X-Shopify-Webhook-Id; type and action the topic split at its slash
// ("orders/paid" is type orders, action paid), so filters read "orders.paid".
type shopify struct{ profile }

// shopifyHeader reads a Shopify header under either of its names.
func shopifyHeader(h http.Header, name string) string {
	return firstOf(h.Get("X-Shopify-"+name), h.Get("Shopify-"+name))
}

func (shopify) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	want, err := signature("X-Shopify-Hmac-Sha256", shopifyHeader(r.Header, "Hmac-Sha256"), "base64", 32)
	if err != nil {
		return err
	}
	return matchBodyMAC(secrets, sha256.New, r.Body, want)
}

func (shopify) Event(r *Request, _ map[string]string) Event {
	typ, action, _ := strings.Cut(shopifyHeader(r.Header, "Topic"), "/")
	id := firstOf(shopifyHeader(r.Header, "Event-Id"), shopifyHeader(r.Header, "Webhook-Id"))
	return Event{ID: idOrHash(id, r.Body), Type: typ, Action: action}
}

// SentHeaders: Shopify's header family, with and without the X- prefix
// (topic, HMAC, shop domain, API version, webhook and event ids, trigger
// time, …).
func (shopify) SentHeaders(map[string]string) []string { return []string{"X-Shopify-*", "Shopify-*"} }

func (shopify) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("shopify", opts)
}
