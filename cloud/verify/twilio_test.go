package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTwilioURLs(t *testing.T) {
	cases := map[string][]string{
		"https://example.com/a?b=1":           {"https://example.com/a?b=1", "https://example.com:443/a?b=1"},
		"https://example.com:443/a?b=1":       {"https://example.com:443/a?b=1", "https://example.com/a?b=1"},
		"https://example.com:8443/a":          {"https://example.com:8443/a", "https://example.com/a"},
		"http://example.com/a":                {"http://example.com/a", "http://example.com:80/a"},
		"HTTPS://example.com?x=1":             {"HTTPS://example.com?x=1", "HTTPS://example.com:443?x=1"},
		"https://example.com":                 {"https://example.com", "https://example.com:443"},
		"https://user:pass@example.com/a":     {"https://user:pass@example.com/a", "https://user:pass@example.com:443/a"},
		"https://user:pass@example.com:444/a": {"https://user:pass@example.com:444/a", "https://user:pass@example.com/a"},
		"https://[::1]/a":                     {"https://[::1]/a", "https://[::1]:443/a"},
		"https://[::1]:8443/a":                {"https://[::1]:8443/a", "https://[::1]/a"},
		"https://example.com/a:b?c=d:e":       {"https://example.com/a:b?c=d:e", "https://example.com:443/a:b?c=d:e"},
		"ftp://example.com/a":                 {"ftp://example.com/a"},
		"not a url":                           {"not a url"},
		"https://":                            {"https://"},
	}
	for in, want := range cases {
		require.Equal(t, want, twilioURLs(in), in)
	}
}

func twilioForm(t *testing.T, secret, signedURL, body string) *Request {
	t.Helper()
	form, err := url.ParseQuery(body)
	require.NoError(t, err)
	sig := base64.StdEncoding.EncodeToString(sha1MAC([]byte(secret), twilioData(signedURL, form)))
	r := request(map[string]string{"Content-Type": formType, "X-Twilio-Signature": sig}, []byte(body))
	return r
}

func TestTwilioURLVariants(t *testing.T) {
	p, _ := Lookup("twilio")
	secret := [][]byte{[]byte("12345")}
	body := "CallSid=CA1&CallStatus=ringing"
	cases := []struct {
		signed, public string
		want           error
	}{
		{"https://relay.example.com/api/webhooks/h/tw", "https://relay.example.com/api/webhooks/h/tw", nil},
		{"https://relay.example.com:443/api/webhooks/h/tw", "https://relay.example.com/api/webhooks/h/tw", nil},
		{"https://relay.example.com/api/webhooks/h/tw", "https://relay.example.com:443/api/webhooks/h/tw", nil},
		{"http://relay.example.com:80/api/webhooks/h/tw", "http://relay.example.com/api/webhooks/h/tw", nil},
		{"https://relay.example.com/api/webhooks/h/tw?x=%27", "https://relay.example.com/api/webhooks/h/tw?x=%27", nil},
		// Raw bytes: the URL is never re-encoded to make it match.
		{"https://relay.example.com/api/webhooks/h/tw?x=%27", "https://relay.example.com/api/webhooks/h/tw?x='", ErrMismatch},
		{"https://relay.example.com/api/webhooks/h/tw", "https://relay.example.com/api/webhooks/h/other", ErrMismatch},
		{"https://relay.example.com/api/webhooks/h/tw", "http://relay.example.com/api/webhooks/h/tw", ErrMismatch},
		{"https://relay.example.com/api/webhooks/h/tw", "", ErrNoURL},
		{"https://relay.example.com/api/webhooks/h/tw", "/api/webhooks/h/tw", ErrNoURL},
		{"https://relay.example.com/api/webhooks/h/tw", "ftp://relay.example.com/api/webhooks/h/tw", ErrNoURL},
	}
	for _, c := range cases {
		r := twilioForm(t, "12345", c.signed, body)
		r.URL = c.public
		err := p.Verify(r, secret, nil)
		requireVerdict(t, err, c.want, "%s signed, %s public", c.signed, c.public)
	}
}

func TestTwilioParams(t *testing.T) {
	p, _ := Lookup("twilio")
	const u = "https://relay.example.com/tw"
	secret := [][]byte{[]byte("12345")}
	sign := func(data string) string {
		return base64.StdEncoding.EncodeToString(sha1MAC([]byte("12345"), data))
	}
	cases := []struct {
		name, body, data string
		want             error
	}{
		{"sorted by name, byte-wise", "b=2&B=1&a=3", u + "B1a3b2", nil},
		{"percent and plus decoded", "Body=hi+there%21&To=%2B1", u + "Bodyhi there!To+1", nil},
		{"repeated name, values sorted", "x=2&x=1", u + "x1x2", nil},
		{"repeated identical values, each", "x=1&x=1&y=2", u + "x1x1y2", nil},
		{"repeated identical values, once", "x=1&x=1&y=2", u + "x1y2", nil},
		{"empty value", "x=&y=1", u + "xy1", nil},
		{"no parameters", "", u, nil},
		{"a parameter dropped", "x=1", u + "x1y2", ErrMismatch},
		{"order of names ignored by the sender", "b=2&a=1", u + "b2a1", ErrMismatch},
		{"bad escape", "x=%zz", u + "x%zz", ErrMalformed},
	}
	for _, c := range cases {
		r := request(map[string]string{"Content-Type": formType, "X-Twilio-Signature": sign(c.data)}, []byte(c.body))
		r.URL = u
		err := p.Verify(r, secret, nil)
		requireVerdict(t, err, c.want, c.name)
	}
}

func TestTwilioJSONBody(t *testing.T) {
	p, _, r, secret := verifiedVector(t, "twilio", "json-body-bodySHA256")

	// The URL (with its hash) is signed, and the body must match the hash.
	changed := *r
	changed.Body = []byte(`{"property": "value", "boolean": false}`)
	require.ErrorIs(t, p.Verify(&changed, secret, nil), ErrMismatch)
	sum := sha256.Sum256(changed.Body)
	changed.URL = "https://mycompany.com/myapp.php?foo=1&bar=2&bodySHA256=" + hex.EncodeToString(sum[:])
	require.ErrorIs(t, p.Verify(&changed, secret, nil), ErrMismatch, "a new hash is not signed")
	changed.URL = "https://mycompany.com/myapp.php?foo=1&bar=2&bodySHA256=xyz"
	require.ErrorIs(t, p.Verify(&changed, secret, nil), ErrMalformed)

	// Without bodySHA256 a JSON body has nothing vouching for it.
	s := signers["twilio-json"]
	plain := request(map[string]string{"Content-Type": "application/json",
		"X-Twilio-Signature": base64.StdEncoding.EncodeToString(sha1MAC(s.secrets[0], twilioTestURL))}, s.body)
	plain.URL = twilioTestURL
	require.ErrorIs(t, p.Verify(plain, [][]byte{s.secrets[0]}, nil), ErrMismatch)
	plain.Body = nil
	require.NoError(t, p.Verify(plain, [][]byte{s.secrets[0]}, nil), "no body: the URL alone is signed")
}

func TestTwilioEvent(t *testing.T) {
	p, _ := Lookup("twilio")
	form := func(body string, headers ...string) *Request {
		h := map[string]string{"Content-Type": formType}
		for i := 0; i+1 < len(headers); i += 2 {
			h[headers[i]] = headers[i+1]
		}
		return request(h, []byte(body))
	}
	cases := []struct {
		r    *Request
		want Event
	}{
		{form("MessageSid=SM1&MessageStatus=delivered"), Event{ID: "SM1:delivered", Type: "message", Action: "delivered"}},
		{form("SmsSid=SM2&SmsStatus=received&MessageSid=SM2"), Event{ID: "SM2:received", Type: "message", Action: "received"}},
		{form("CallSid=CA1&CallStatus=completed"), Event{ID: "CA1:completed", Type: "call", Action: "completed"}},
		{form("CallSid=CA1&CallStatus=completed", "I-Twilio-Idempotency-Token", "tok-1"), Event{ID: "tok-1", Type: "call", Action: "completed"}},
		{form("EventType=onMessageAdded&ConversationSid=CH1"), Event{ID: BodyHashID([]byte("EventType=onMessageAdded&ConversationSid=CH1")), Type: "onMessageAdded"}},
		{request(map[string]string{"Content-Type": "application/json"}, []byte(`{"type":"com.twilio.messaging.message.delivered"}`)),
			Event{ID: BodyHashID([]byte(`{"type":"com.twilio.messaging.message.delivered"}`)), Type: "com.twilio.messaging.message.delivered"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, p.Event(c.r, nil))
	}
	_, r := findVector(t, "twilio.json", "default-params")
	require.Equal(t, Event{ID: "CA1234567890ABCDE", Type: "call"}, p.Event(r, nil), "no status: the sid alone")
}

func TestTwilioAck(t *testing.T) {
	p, _ := Lookup("twilio")
	a := p.(Acknowledger)
	_, r := findVector(t, "twilio.json", "default-params")
	reply, ok := a.Ack(r)
	require.True(t, ok)
	require.Equal(t, 200, reply.Status)
	require.Contains(t, reply.ContentType, "xml")
	require.Contains(t, string(reply.Body), "<Response></Response>")
	_, r = findVector(t, "twilio.json", "json-body-bodySHA256")
	_, ok = a.Ack(r)
	require.False(t, ok)
}
