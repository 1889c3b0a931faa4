package verify

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A signer makes requests a provider accepts: what the sender does, written
// independently of the verifiers so that the tests and fuzz targets check
// one against the other.
type signer struct {
	provider string
	opts     map[string]string
	secrets  [2][]byte // signing happens with one of two secrets
	// sign makes a request for body, signed with secrets[i] at time at.
	sign func(s *signer, i int, body []byte, at time.Time) *Request
	// body is a typical body for the provider.
	body []byte
	// signatureHeaders are the headers whose absence is ErrMissingSignature.
	signatureHeaders []string
	// malformed sets a header to a value that does not parse; nil where
	// nothing can be malformed (a plain token).
	malformed map[string]string
	// tolerance is the timestamp window; 0 where nothing is timed.
	tolerance time.Duration
	// bodyBound: the signature covers the body.
	bodyBound bool
	// canSign reports whether a body can be signed at all (twilio: a form
	// must parse); nil means any body.
	canSign func(body []byte) bool
	// sameContent reports whether two bodies are the same to the scheme
	// (twilio signs decoded form parameters, not bytes); nil means
	// bytes.Equal.
	sameContent func(a, b []byte) bool
}

func (s *signer) request(i int, body []byte, at time.Time) *Request {
	r := s.sign(s, i, body, at)
	r.Now = at
	return r
}

func sha256MAC(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func sha1MAC(key []byte, parts ...string) []byte {
	m := hmac.New(sha1.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func unix(at time.Time) string { return strconv.FormatInt(at.Unix(), 10) }

// Two Ed25519 key pairs from fixed seeds; discord sources store the public
// key, hex.
type discordKey struct {
	private ed25519.PrivateKey
	public  string
}

var testDiscordKeys = func() [2]discordKey {
	var keys [2]discordKey
	for i := range keys {
		priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize))
		keys[i] = discordKey{priv, hex.EncodeToString(priv.Public().(ed25519.PublicKey))}
	}
	return keys
}()

// whsecKey decodes a whsec_ secret the way a Standard Webhooks sender does.
func whsecKey(secret []byte) []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(secret), "whsec_"))
	if err != nil {
		panic(err)
	}
	return k
}

func standardSign(s *signer, i int, body []byte, at time.Time) *Request {
	id := "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	sig := sha256MAC(whsecKey(s.secrets[i]), id, ".", unix(at), ".", string(body))
	return request(map[string]string{
		"Content-Type":      "application/json",
		"webhook-id":        id,
		"webhook-timestamp": unix(at),
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(sig),
	}, body)
}

const twilioTestURL = "https://relay.example.com/api/webhooks/h1/sms?tag=a%27b"

// twilioData renders URL and form parameters the way Twilio's docs say:
// names sorted, then each name followed by its value.
func twilioData(rawURL string, form url.Values) string {
	var b strings.Builder
	b.WriteString(rawURL)
	names := make([]string, 0, len(form))
	for n := range form {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vals := slices.Clone(form[n])
		sort.Strings(vals)
		for _, v := range vals {
			b.WriteString(n)
			b.WriteString(v)
		}
	}
	return b.String()
}

var signers = map[string]*signer{
	"github": {
		provider: "github",
		secrets:  [2][]byte{[]byte("It's a Secret to Everybody"), []byte("another secret")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{
				"X-GitHub-Event":      "issues",
				"X-GitHub-Delivery":   "72d3162e-cc78-11e3-81ab-4c9367dc0958",
				"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(sha256MAC(s.secrets[i], string(body))),
			}, body)
		},
		body:             []byte(`{"action":"opened","issue":{"number":1}}`),
		signatureHeaders: []string{"X-Hub-Signature-256"},
		malformed:        map[string]string{"X-Hub-Signature-256": "sha256=xyz"},
		bodyBound:        true,
	},
	"stripe": {
		provider: "stripe",
		secrets:  [2][]byte{[]byte("whsec_test_secret_one"), []byte("whsec_test_secret_two")},
		sign: func(s *signer, i int, body []byte, at time.Time) *Request {
			sig := hex.EncodeToString(sha256MAC(s.secrets[i], unix(at), ".", string(body)))
			return request(map[string]string{"Stripe-Signature": "t=" + unix(at) + ",v1=" + sig}, body)
		},
		body:             []byte("{\n  \"id\": \"evt_1\",\n  \"type\": \"invoice.paid\"\n}\n"),
		signatureHeaders: []string{"Stripe-Signature"},
		malformed:        map[string]string{"Stripe-Signature": "t=soon,v1=00"},
		tolerance:        5 * time.Minute,
		bodyBound:        true,
	},
	"slack": {
		provider: "slack",
		secrets:  [2][]byte{[]byte("8f742231b10e8888abcd99yyyzzz85a5"), []byte("e2c8b5f0a4d9c1b7e6f3a8d2c5b9e1f4")},
		sign: func(s *signer, i int, body []byte, at time.Time) *Request {
			sig := hex.EncodeToString(sha256MAC(s.secrets[i], "v0:", unix(at), ":", string(body)))
			return request(map[string]string{
				"Content-Type":              "application/json",
				"X-Slack-Request-Timestamp": unix(at),
				"X-Slack-Signature":         "v0=" + sig,
			}, body)
		},
		body:             []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}`),
		signatureHeaders: []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		malformed:        map[string]string{"X-Slack-Signature": "v1=abcd"},
		tolerance:        5 * time.Minute,
		bodyBound:        true,
	},
	"standard": {
		provider: "standard",
		secrets: [2][]byte{[]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
			[]byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("a second secret, 32 bytes long!!")))},
		sign:             standardSign,
		body:             []byte(`{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{}}`),
		signatureHeaders: []string{"webhook-signature", "webhook-id", "webhook-timestamp"},
		malformed:        map[string]string{"webhook-signature": "v1,not*base64"},
		tolerance:        5 * time.Minute,
		bodyBound:        true,
	},
	"shopify": {
		provider: "shopify",
		secrets:  [2][]byte{[]byte("test_secret_key"), []byte("test_secret_key2")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{
				"X-Shopify-Topic":       "orders/paid",
				"X-Shopify-Event-Id":    "98880550-7158-44d4-b7cd-2c97c8a091b5",
				"X-Shopify-Hmac-Sha256": base64.StdEncoding.EncodeToString(sha256MAC(s.secrets[i], string(body))),
			}, body)
		},
		body:             []byte(`{"id":820982911946154508,"email":"jon@example.com"}`),
		signatureHeaders: []string{"X-Shopify-Hmac-Sha256"},
		malformed:        map[string]string{"X-Shopify-Hmac-Sha256": strings.Repeat("ab", 32)},
		bodyBound:        true,
	},
	"gitlab": {
		provider: "gitlab",
		secrets:  [2][]byte{[]byte("glwt-3b1f9c0e8d7a6b5c4d3e2f1a"), []byte("glwt-other")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{
				"X-Gitlab-Event": "Push Hook",
				"X-Gitlab-Token": string(s.secrets[i]),
			}, body)
		},
		body:             []byte(`{"object_kind":"push","ref":"refs/heads/main"}`),
		signatureHeaders: []string{"X-Gitlab-Token"},
	},
	"gitlab-signing-token": {
		provider: "gitlab",
		secrets: [2][]byte{[]byte("whsec_PvHgFIYMOaiSSCr9/tyQ9HE9Yi0tBdoBoi2BR82Lgrg="),
			[]byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("another gitlab signing token")))},
		sign: func(s *signer, i int, body []byte, at time.Time) *Request {
			r := standardSign(s, i, body, at)
			r.Header.Set("X-Gitlab-Event", "Push Hook")
			r.Header.Set("Idempotency-Key", r.Header.Get("webhook-id"))
			return r
		},
		body:             []byte(`{"object_kind":"push","ref":"refs/heads/main"}`),
		signatureHeaders: []string{"webhook-signature"},
		malformed:        map[string]string{"webhook-timestamp": "yesterday"},
		tolerance:        5 * time.Minute,
		bodyBound:        true,
	},
	"telegram": {
		provider: "telegram",
		secrets:  [2][]byte{[]byte("Tg_secret-Token_0123456789"), []byte("Tg_other-Token")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{"X-Telegram-Bot-Api-Secret-Token": string(s.secrets[i])}, body)
		},
		body:             []byte(`{"update_id":10000,"message":{"message_id":1,"text":"/start"}}`),
		signatureHeaders: []string{"X-Telegram-Bot-Api-Secret-Token"},
	},
	"linear": {
		provider: "linear",
		secrets:  [2][]byte{[]byte("lin_wh_7f3c2a1b9e8d7c6b5a4f3e2d1c0b9a8f"), []byte("lin_wh_other")},
		sign: func(s *signer, i int, body []byte, at time.Time) *Request {
			return request(map[string]string{
				"Linear-Delivery":  "0e1d2c3b-4a59-4687-9a8b-7c6d5e4f3a2b",
				"Linear-Event":     "Issue",
				"Linear-Timestamp": strconv.FormatInt(at.UnixMilli(), 10),
				"Linear-Signature": hex.EncodeToString(sha256MAC(s.secrets[i], string(body))),
			}, body)
		},
		body:             []byte(`{"action":"update","type":"Issue","data":{"id":"i1"}}`),
		signatureHeaders: []string{"Linear-Signature"},
		malformed:        map[string]string{"Linear-Signature": "sha256=00"},
		tolerance:        60 * time.Second,
		bodyBound:        true,
		// A body carrying its own webhookTimestamp is checked on it.
		canSign: func(body []byte) bool { return !jsonObject(body).has("webhookTimestamp") },
	},
	"vercel": {
		provider: "vercel",
		secrets:  [2][]byte{[]byte("vercel_wh_secret_9a8b7c6d5e4f"), []byte("vercel_other")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{"x-vercel-signature": hex.EncodeToString(sha1MAC(s.secrets[i], string(body)))}, body)
		},
		body:             []byte(`{"id":"evt_1","type":"deployment.succeeded","payload":{}}`),
		signatureHeaders: []string{"x-vercel-signature"},
		malformed:        map[string]string{"x-vercel-signature": strings.Repeat("a", 64)},
		bodyBound:        true,
	},
	"twilio-form": {
		provider: "twilio",
		secrets:  [2][]byte{[]byte("12345"), []byte("67890")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			form, err := url.ParseQuery(string(body))
			if err != nil {
				panic(err)
			}
			r := request(map[string]string{
				"Content-Type":       "application/x-www-form-urlencoded",
				"X-Twilio-Signature": base64.StdEncoding.EncodeToString(sha1MAC(s.secrets[i], twilioData(twilioTestURL, form))),
			}, body)
			r.URL = twilioTestURL
			return r
		},
		body:             []byte("MessageSid=SM1&MessageStatus=delivered&Body=hi+there%21&To=%2B15551234567"),
		signatureHeaders: []string{"X-Twilio-Signature"},
		malformed:        map[string]string{"X-Twilio-Signature": "not base64!"},
		bodyBound:        true,
		canSign: func(body []byte) bool {
			_, err := url.ParseQuery(string(body))
			return err == nil
		},
		sameContent: func(a, b []byte) bool {
			fa, errA := url.ParseQuery(string(a))
			fb, errB := url.ParseQuery(string(b))
			if errA != nil || errB != nil {
				return false
			}
			// Repeated identical values also count once (see twilio).
			return slices.Contains(twilioParams(fb), twilioParams(fa)[0])
		},
	},
	"twilio-json": {
		provider: "twilio",
		secrets:  [2][]byte{[]byte("12345"), []byte("67890")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			sum := sha256.Sum256(body)
			u := twilioTestURL + "&bodySHA256=" + hex.EncodeToString(sum[:])
			r := request(map[string]string{
				"Content-Type":       "application/json",
				"X-Twilio-Signature": base64.StdEncoding.EncodeToString(sha1MAC(s.secrets[i], u)),
			}, body)
			r.URL = u
			return r
		},
		body:             []byte(`{"property": "value", "boolean": true}`),
		signatureHeaders: []string{"X-Twilio-Signature"},
		malformed:        map[string]string{"X-Twilio-Signature": "c2hvcnQ="},
		bodyBound:        true,
	},
	"discord": {
		provider: "discord",
		secrets:  [2][]byte{[]byte(testDiscordKeys[0].public), []byte(testDiscordKeys[1].public)},
		sign: func(s *signer, i int, body []byte, at time.Time) *Request {
			sig := ed25519.Sign(testDiscordKeys[i].private, append([]byte(unix(at)), body...))
			return request(map[string]string{
				"X-Signature-Ed25519":   hex.EncodeToString(sig),
				"X-Signature-Timestamp": unix(at),
			}, body)
		},
		body:             []byte(`{"id":"787053080478613555","type":2,"token":"tok","data":{"name":"deploy"}}`),
		signatureHeaders: []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
		malformed:        map[string]string{"X-Signature-Ed25519": strings.Repeat("0", 127)},
		tolerance:        5 * time.Minute,
		bodyBound:        true,
	},
	"generic": {
		provider: "generic",
		secrets:  [2][]byte{[]byte("k"), []byte("k2")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{"X-Signature": hex.EncodeToString(sha256MAC(s.secrets[i], string(body)))}, body)
		},
		body:             []byte(`{"type":"invoice.created","id":1}`),
		signatureHeaders: []string{"X-Signature"},
		malformed:        map[string]string{"X-Signature": "sha256=zz"},
		bodyBound:        true,
	},
	"generic-token": {
		provider: "generic",
		opts:     map[string]string{"mode": "token", "signature_header": "X-Relay-Token"},
		secrets:  [2][]byte{[]byte("shared-token-1"), []byte("shared-token-2")},
		sign: func(s *signer, i int, body []byte, _ time.Time) *Request {
			return request(map[string]string{"X-Relay-Token": string(s.secrets[i])}, body)
		},
		body:             []byte("anything"),
		signatureHeaders: []string{"X-Relay-Token"},
	},
}

// TestSchemes checks what every scheme must do: accept its own signature,
// with rotation; refuse a tampered body, a wrong secret, no secret, a
// missing or malformed header, a stale or future timestamp; and never put
// the secret or the expected signature in an error.
func TestSchemes(t *testing.T) {
	covered := map[string]bool{}
	for name, s := range signers {
		covered[s.provider] = true
		t.Run(name, func(t *testing.T) {
			p, ok := Lookup(s.provider)
			require.True(t, ok)
			verify := func(r *Request, secrets ...[]byte) error {
				err := p.Verify(r, secrets, s.opts)
				requireNoLeak(t, err, string(s.secrets[0]), string(s.secrets[1]))
				for _, h := range s.signatureHeaders {
					if v := s.request(0, s.body, testNow).Header.Get(h); len(v) >= 16 {
						require.NotContains(t, errString(err), v[len(v)-16:], "error message shows the expected %s", h)
					}
				}
				return err
			}
			good := s.request(0, s.body, testNow)
			require.NoError(t, verify(good, s.secrets[0]))
			require.NoError(t, verify(good, s.secrets[1], s.secrets[0]), "rotation: the second secret matches")
			require.NoError(t, verify(s.request(1, s.body, testNow), s.secrets[0], s.secrets[1]))
			require.ErrorIs(t, verify(good, s.secrets[1]), ErrMismatch, "wrong secret")
			require.ErrorIs(t, verify(good), ErrNoSecrets)

			if s.bodyBound {
				for _, changed := range [][]byte{
					append(slices.Clone(s.body), ' '),
					s.body[:len(s.body)-1],
					[]byte(strings.Replace(string(s.body), "1", "2", 1)),
					nil,
				} {
					if bytes.Equal(changed, s.body) {
						continue
					}
					r := s.request(0, s.body, testNow)
					r.Body = changed
					require.Error(t, verify(r, s.secrets[0]), "tampered body %q", changed)
				}
			} else {
				r := s.request(0, s.body, testNow)
				r.Body = []byte("unsigned: any body passes with the right token")
				require.NoError(t, verify(r, s.secrets[0]))
			}

			for _, h := range s.signatureHeaders {
				r := s.request(0, s.body, testNow)
				r.Header.Del(h)
				require.ErrorIs(t, verify(r, s.secrets[0]), ErrMissingSignature, "without %s", h)
			}
			for h, v := range s.malformed {
				r := s.request(0, s.body, testNow)
				r.Header.Set(h, v)
				require.ErrorIs(t, verify(r, s.secrets[0]), ErrMalformed, "%s: %q", h, v)
			}

			if s.tolerance > 0 {
				signedAt := testNow
				for _, now := range []time.Time{signedAt.Add(s.tolerance + time.Second), signedAt.Add(-s.tolerance - time.Second), signedAt.Add(24 * time.Hour)} {
					r := s.request(0, s.body, signedAt)
					r.Now = now
					require.ErrorIs(t, verify(r, s.secrets[0]), ErrStale, "signed %s, now %s", signedAt, now)
				}
				for _, now := range []time.Time{signedAt.Add(s.tolerance), signedAt.Add(-s.tolerance)} {
					r := s.request(0, s.body, signedAt)
					r.Now = now
					require.NoError(t, verify(r, s.secrets[0]), "at the edge of the window")
				}
				// A stale request with a wrong secret is a mismatch: the
				// window is judged only for authentic requests.
				r := s.request(1, s.body, signedAt)
				r.Now = signedAt.Add(time.Hour)
				require.ErrorIs(t, verify(r, s.secrets[0]), ErrMismatch)
			}

			require.NotEmpty(t, p.Event(good, s.opts).ID)
		})
	}
	for _, n := range Names() {
		require.True(t, covered[n], "no signer for %s", n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
