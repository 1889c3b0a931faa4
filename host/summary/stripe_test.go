package summary

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/relaykit/relay/shared"
)

// Real Stripe events decode as json.Unmarshal decodes them.
func TestDecodeStripePayloads(t *testing.T) {
	decodesAsUnmarshal(t, fixtures(t, "stripe"), decodeStripe)
}

// BenchmarkOfStripe summarises each real Stripe event.
func BenchmarkOfStripe(b *testing.B) {
	for _, name := range fixtures(b, "stripe") {
		body, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		w := shared.Webhook{Source: "stripe", EventType: "payment_intent.succeeded", RawBody: body}
		b.Run(filepath.Base(name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				Of(w, Stripe)
			}
		})
	}
}

// FuzzDecodeStripe: on every valid JSON body whose objects repeat no member
// name, decodeStripe fills the event exactly as json.Unmarshal does, and
// fails where it fails.
func FuzzDecodeStripe(f *testing.F) {
	for _, s := range []string{`null`, ` null `, `[]`, `"x"`, `{}`, `{"data":"x"}`, `{"data":null}`, `{"data":{"object":null}}`,
		`{"data":{"object":[]}}`, `{"Data":{"Object":{"ID":"pi_1"}}}`, `{"id":"evt_1","type":7,"data":{"object":{"customer":{"id":"cus_1"}}}}`,
		`{"id":"evt_\u0031","type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1"}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { decodesAsUnmarshalFuzz(t, body, decodeStripe) })
}
