package verify

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func stripeSig(secret []byte, ts string, body []byte) string {
	return hex.EncodeToString(sha256MAC(secret, ts, ".", string(body)))
}

func TestStripeHeader(t *testing.T) {
	p, _ := Lookup("stripe")
	body := []byte(`{"id":"evt_1"}` + "\n")
	secret := []byte("whsec_abc")
	ts := unix(testNow)
	good := stripeSig(secret, ts, body)
	other := stripeSig([]byte("whsec_old"), ts, body)
	cases := []struct {
		name, header string
		want         error
	}{
		{"one v1", "t=" + ts + ",v1=" + good, nil},
		{"several v1, the second matches", "t=" + ts + ",v1=" + other + ",v1=" + good, nil},
		{"v1 before t, spaces", " v1=" + good + " , t=" + ts + " ", nil},
		{"v0 is ignored", "t=" + ts + ",v1=" + good + ",v0=" + strings.Repeat("0", 64), nil},
		{"unknown schemes are ignored", "t=" + ts + ",v2=zz,v1=" + good + ",x", nil},
		{"unparseable v1 skipped", "t=" + ts + ",v1=nothex,v1=" + good, nil},
		{"upper-case hex", "t=" + ts + ",v1=" + strings.ToUpper(good), nil},
		{"only v0, even right", "t=" + ts + ",v0=" + good, ErrMalformed},
		{"v0 right, v1 wrong: no downgrade", "t=" + ts + ",v0=" + good + ",v1=" + other, ErrMismatch},
		{"no t", "v1=" + good, ErrMalformed},
		{"two t", "t=" + ts + ",t=" + ts + ",v1=" + good, ErrMalformed},
		{"t not a number", "t=" + ts + "a,v1=" + good, ErrMalformed},
		{"negative t", "t=-" + ts + ",v1=" + good, ErrMalformed},
		{"no v1", "t=" + ts, ErrMalformed},
		{"only unparseable v1", "t=" + ts + ",v1=" + good[:62], ErrMalformed},
		{"t differs from the signed one", "t=" + unix(testNow.Add(time.Second)) + ",v1=" + good, ErrMismatch},
		{"garbage", ",,,===", ErrMalformed},
	}
	for _, c := range cases {
		err := p.Verify(request(map[string]string{"Stripe-Signature": c.header}, body), [][]byte{secret}, nil)
		requireVerdict(t, err, c.want, c.name)
	}
}

// The endpoint secret is used as written, whsec_ and all; a sender that
// decoded it like a Standard Webhooks secret does not verify.
func TestStripeSecretIsNotDecoded(t *testing.T) {
	p, _ := Lookup("stripe")
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	decoded, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	body := []byte(`{"id":"evt_1"}`)
	ts := unix(testNow)
	r := request(map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + stripeSig(decoded, ts, body)}, body)
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(secret)}, nil), ErrMismatch)
	r = request(map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + stripeSig([]byte(secret), ts, body)}, body)
	require.NoError(t, p.Verify(r, [][]byte{[]byte(secret)}, nil))
}

func TestStripeEvent(t *testing.T) {
	p, _ := Lookup("stripe")
	_, r := findVector(t, "stripe.json", "dotnet-event-valid")
	require.Equal(t, Event{ID: "evt_123", Type: "customer.created"}, p.Event(r, nil))
	thin := request(nil, []byte(`{"id":"evt_test_65R","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered"}`))
	require.Equal(t, Event{ID: "evt_test_65R", Type: "v1.billing.meter.error_report_triggered"}, p.Event(thin, nil))
	odd := request(nil, []byte(`not json`))
	require.Equal(t, Event{ID: BodyHashID(odd.Body)}, p.Event(odd, nil))
}
