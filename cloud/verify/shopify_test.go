package verify

import (
	"encoding/base64"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShopifyHeaderNames(t *testing.T) {
	p, _ := Lookup("shopify")
	s := signers["shopify"]
	mac := sha256MAC(s.secrets[0], string(s.body))
	// Newer event deliveries drop the X- prefix.
	r := request(map[string]string{
		"shopify-hmac-sha256": base64.StdEncoding.EncodeToString(mac),
		"shopify-topic":       "app/uninstalled",
		"shopify-event-id":    "ev-1",
	}, s.body)
	require.NoError(t, p.Verify(r, [][]byte{s.secrets[0]}, nil))
	require.Equal(t, Event{ID: "ev-1", Type: "app", Action: "uninstalled"}, p.Event(r, nil))

	r.Header.Set("shopify-hmac-sha256", hex.EncodeToString(mac))
	require.ErrorIs(t, p.Verify(r, [][]byte{s.secrets[0]}, nil), ErrMalformed, "hex is not Shopify's encoding")
	r.Header.Set("shopify-hmac-sha256", base64.RawStdEncoding.EncodeToString(mac))
	require.ErrorIs(t, p.Verify(r, [][]byte{s.secrets[0]}, nil), ErrMalformed, "padding is part of the encoding")
}

func TestShopifyEvent(t *testing.T) {
	p, _ := Lookup("shopify")
	_, r := findVector(t, "shopify.json", "shopify-api-validate-valid")
	require.Equal(t, Event{ID: "123456789", Type: "products", Action: "create"}, p.Event(r, nil), "without an event id, the webhook id")
	r.Header.Set("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5")
	require.Equal(t, "98880550-7158-44d4-b7cd-2c97c8a091b5", p.Event(r, nil).ID, "the event id is Shopify's duplicate detector")
	bare := request(nil, []byte(`{}`))
	require.Equal(t, Event{ID: BodyHashID(bare.Body)}, p.Event(bare, nil))
}
