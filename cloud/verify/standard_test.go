package verify

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStandardSignatureList(t *testing.T) {
	p, _ := Lookup("standard")
	s := signers["standard"]
	good := s.request(0, s.body, testNow)
	sig := good.Header.Get("webhook-signature")
	other := s.request(1, s.body, testNow).Header.Get("webhook-signature")
	ed := "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
	cases := []struct {
		name, header string
		want         error
	}{
		{"old and new key while rotating", other + " " + sig, nil},
		{"extra spaces", "  " + sig + "   " + other + " ", nil},
		{"ed25519 and unknown versions skipped", ed + " v2,abc " + sig, nil},
		{"only unknown versions", ed + " v2," + strings.TrimPrefix(sig, "v1,"), ErrMalformed},
		{"no version", strings.TrimPrefix(sig, "v1,"), ErrMalformed},
		{"unpadded signature", strings.TrimRight(sig, "="), ErrMalformed},
		{"comma-separated instead of spaces", sig + "," + other, ErrMalformed},
		{"wrong key only", other, ErrMismatch},
	}
	for _, c := range cases {
		r := s.request(0, s.body, testNow)
		r.Header.Set("webhook-signature", c.header)
		err := p.Verify(r, [][]byte{s.secrets[0]}, nil)
		requireVerdict(t, err, c.want, c.name)
	}
}

// Svix sends the same scheme under svix-* names.
func TestStandardSvixHeaders(t *testing.T) {
	p, _ := Lookup("svix")
	s := signers["standard"]
	sw := s.request(0, s.body, testNow)
	r := request(map[string]string{
		"svix-id":        sw.Header.Get("webhook-id"),
		"svix-timestamp": sw.Header.Get("webhook-timestamp"),
		"svix-signature": sw.Header.Get("webhook-signature"),
	}, s.body)
	require.NoError(t, p.Verify(r, [][]byte{s.secrets[0]}, nil))
	require.Equal(t, Event{ID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", Type: "contact.created"}, p.Event(r, nil))

	r.Header.Del("svix-id")
	require.ErrorIs(t, p.Verify(r, [][]byte{s.secrets[0]}, nil), ErrMissingSignature, "the headers are not mixed")
}

func TestStandardSecretForms(t *testing.T) {
	p, _ := Lookup("standard-webhooks")
	v, r := findVector(t, "standard-webhooks.json", "lib-sign-vector")
	bare := strings.TrimPrefix(v.Secret, "whsec_")
	require.NoError(t, p.Verify(r, [][]byte{[]byte(bare)}, nil), "the whsec_ prefix is optional")
	_, r2 := findVector(t, "standard-webhooks.json", "rust-sign-vector")
	require.NoError(t, p.Verify(r2, [][]byte{[]byte("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")}, nil))

	key := base64.StdEncoding.EncodeToString([]byte("a key of 25 bytes........"))
	require.True(t, strings.HasSuffix(key, "="))
	body := []byte(`{}`)
	signed := request(map[string]string{"webhook-id": "m", "webhook-timestamp": unix(testNow),
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(sha256MAC([]byte("a key of 25 bytes........"), "m.", unix(testNow), ".", string(body)))}, body)
	require.NoError(t, p.Verify(signed, [][]byte{[]byte("whsec_" + strings.TrimRight(key, "="))}, nil), "missing padding tolerated")

	for _, bad := range []string{"whsec_not*base64", "whsec_", "", v.Secret + "x"} {
		require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(bad)}, nil), ErrMismatch, bad)
	}
}

func TestStandardEvent(t *testing.T) {
	p, _ := Lookup("standard")
	v, r := findVector(t, "standard-webhooks.json", "lib-sign-vector")
	require.Equal(t, Event{ID: v.Headers["webhook-id"]}, p.Event(r, nil))
	r = request(nil, []byte(`{"type":"invoice.paid"}`))
	require.Equal(t, Event{ID: BodyHashID(r.Body), Type: "invoice.paid"}, p.Event(r, nil))
}

func TestStandardCheckSecret(t *testing.T) {
	p, _ := Lookup("standard")
	c := p.(SecretChecker)
	for _, v := range loadVectors(t, "standard-webhooks.json") {
		require.NoError(t, c.CheckSecret([]byte(v.Secret)), v.Name)
	}
	require.NoError(t, c.CheckSecret([]byte("whsec_"+base64.RawStdEncoding.EncodeToString(make([]byte, 32)))), "unpadded")
	cases := map[string]string{
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw":                             "starts with whsec_",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La!aSw":                       "not valid base64",
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)): "16 bytes",
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)): "65 bytes",
		"whsec_": "0 bytes",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw": "not valid base64",
	}
	for secret, want := range cases {
		err := c.CheckSecret([]byte(secret))
		require.ErrorContains(t, err, want, secret)
		if len(secret) > 6 {
			require.NotContains(t, err.Error(), secret[6:], "the error echoes the secret")
		}
	}
}

// Only the canonical encoding of a signature counts: one that differs in the
// unused low bits of its last character is malformed, not the same bytes.
func TestStandardCanonicalBase64(t *testing.T) {
	p, _ := Lookup("standard")
	v, r := findVector(t, "standard-webhooks.json", "lib-sign-vector")
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", r.Header.Get("webhook-signature"))
	r.Header.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMalformed)
}
