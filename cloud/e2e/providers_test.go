package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The signers below are the test's own, written from each provider's
// documented scheme; the receiver re-verifies every delivery with them, as a
// local app would with the provider's own library.

func mac(h func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hexMAC(h func() hash.Hash, key string, parts ...string) string {
	return hex.EncodeToString(mac(h, []byte(key), parts...))
}

func b64MAC(h func() hash.Hash, key []byte, parts ...string) string {
	return base64.StdEncoding.EncodeToString(mac(h, key, parts...))
}

// providerCase is one provider's webhook as the provider would send it, and
// the check a local app runs on what it receives.
type providerCase struct {
	source   string // the source's name, also the provider unless provider says
	provider string
	secret   string
	body     []byte
	header   http.Header
	// check re-verifies the delivered request the provider's way (nil for
	// token schemes, whose secret header is not forwarded).
	check func(h http.Header, body []byte) bool
	// handshake: answered in place, never delivered.
	handshake bool
	wantReply string // part of the answer body expected
	// secretHeader carries the secret itself (token schemes): checked by the
	// cloud, never stored or forwarded.
	secretHeader string
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func fixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	require.NoError(t, err)
	return b
}

func providerCases(t *testing.T, publicURL, hostID string) []providerCase {
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	var cases []providerCase

	// GitHub: HMAC-SHA256 hex over the body.
	ghBody := fixture(t, "github/pull_request.opened.json")
	ghSecret := "gh-provider-secret"
	cases = append(cases, providerCase{
		source: "gh", provider: "github", secret: ghSecret, body: ghBody,
		header: hdr("Content-Type", "application/json", "X-GitHub-Event", "pull_request",
			"X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			"X-Hub-Signature-256", "sha256="+hexMAC(sha256.New, ghSecret, string(ghBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("X-Hub-Signature-256")), []byte("sha256="+hexMAC(sha256.New, ghSecret, string(b))))
		},
	})

	// Stripe: t=…,v1=hex(HMAC-SHA256(secret, t.body)); the whsec_ secret is used as typed.
	stBody := fixture(t, "stripe/invoice.paid.json")
	stSecret := "whsec_test_stripe_endpoint_secret"
	cases = append(cases, providerCase{
		source: "stripe", secret: stSecret, body: stBody,
		header: hdr("Content-Type", "application/json; charset=utf-8",
			"Stripe-Signature", "t="+ts+",v1="+hexMAC(sha256.New, stSecret, ts, ".", string(stBody))+",v0=deadbeef"),
		check: func(h http.Header, b []byte) bool {
			var t, v1 string
			for _, kv := range strings.Split(h.Get("Stripe-Signature"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "t":
					t = v
				case "v1":
					v1 = v
				}
			}
			return hmac.Equal([]byte(v1), []byte(hexMAC(sha256.New, stSecret, t, ".", string(b))))
		},
	})

	// Slack: v0=hex(HMAC-SHA256(secret, "v0:ts:body")), for an Events API
	// callback, a form-encoded slash command, and the url_verification handshake.
	slSecret := "8f742231b10e8888abcd99yyyzzz85a5"
	slackCheck := func(h http.Header, b []byte) bool {
		want := "v0=" + hexMAC(sha256.New, slSecret, "v0:", h.Get("X-Slack-Request-Timestamp"), ":", string(b))
		return hmac.Equal([]byte(h.Get("X-Slack-Signature")), []byte(want))
	}
	slackHeaders := func(body []byte, contentType string) http.Header {
		return hdr("Content-Type", contentType, "X-Slack-Request-Timestamp", ts,
			"X-Slack-Signature", "v0="+hexMAC(sha256.New, slSecret, "v0:", ts, ":", string(body)))
	}
	slEvent := fixture(t, "slack/event_callback.message.json")
	cases = append(cases, providerCase{source: "slack", secret: slSecret, body: slEvent,
		header: slackHeaders(slEvent, "application/json"), check: slackCheck})
	slForm := fixture(t, "slack/slash_command.form-urlencoded.txt")
	cases = append(cases, providerCase{source: "slack-commands", provider: "slack", secret: slSecret, body: slForm,
		header: slackHeaders(slForm, "application/x-www-form-urlencoded"), check: slackCheck})
	slChallenge := fixture(t, "slack/url_verification.json")
	cases = append(cases, providerCase{source: "slack-setup", provider: "slack", secret: slSecret, body: slChallenge,
		header: slackHeaders(slChallenge, "application/json"), handshake: true, wantReply: `"challenge":"valid_challenge_token"`})

	// Standard Webhooks: base64 HMAC-SHA256 of "id.ts.body" with the decoded whsec_ key.
	swKey := make([]byte, 32)
	_, _ = rand.Read(swKey)
	swSecret := "whsec_" + base64.StdEncoding.EncodeToString(swKey)
	swBody := fixture(t, "standard-webhooks/contact.created.json")
	swID := "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	cases = append(cases, providerCase{
		source: "standard", secret: swSecret, body: swBody,
		header: hdr("Content-Type", "application/json", "webhook-id", swID, "webhook-timestamp", ts,
			"webhook-signature", "v1,"+b64MAC(sha256.New, []byte("another-key"), "x")+" v1,"+b64MAC(sha256.New, swKey, swID, ".", ts, ".", string(swBody))),
		check: func(h http.Header, b []byte) bool {
			want := "v1," + b64MAC(sha256.New, swKey, h.Get("webhook-id"), ".", h.Get("webhook-timestamp"), ".", string(b))
			for _, sig := range strings.Fields(h.Get("webhook-signature")) {
				if hmac.Equal([]byte(sig), []byte(want)) {
					return true
				}
			}
			return false
		},
	})

	// Shopify: base64 HMAC-SHA256 of the body (constructed order payload).
	shSecret := "shpss_test_app_secret"
	shBody := []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"254.98","currency":"USD","line_items":[{"title":"Caf\u00e9 mug \ud83c\udf75","quantity":2}]}`)
	cases = append(cases, providerCase{
		source: "shopify", secret: shSecret, body: shBody,
		header: hdr("Content-Type", "application/json", "X-Shopify-Topic", "orders/create",
			"X-Shopify-Shop-Domain", "example.myshopify.com", "X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5",
			"X-Shopify-Hmac-Sha256", b64MAC(sha256.New, []byte(shSecret), string(shBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("X-Shopify-Hmac-Sha256")), []byte(b64MAC(sha256.New, []byte(shSecret), string(b))))
		},
	})

	// GitLab: the secret token, verbatim, in X-Gitlab-Token.
	glSecret := "gitlab-token-Zx9"
	glBody := fixture(t, "gitlab/merge_request.json")
	cases = append(cases, providerCase{
		source: "gitlab", secret: glSecret, body: glBody,
		header: hdr("Content-Type", "application/json", "X-Gitlab-Event", "Merge Request Hook",
			"X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e", "X-Gitlab-Token", glSecret),
		check:        nil, // the secret itself: checked by the relay, not forwarded
		secretHeader: "X-Gitlab-Token",
	})

	// Telegram: the secret token header (constructed update).
	tgSecret := "tg_Secret-token_123"
	tgBody := []byte(`{"update_id":10000,"message":{"message_id":1365,"date":1441645532,"chat":{"id":1111111,"type":"private","first_name":"Test"},"text":"/start"}}`)
	cases = append(cases, providerCase{
		source: "telegram", secret: tgSecret, body: tgBody,
		header:       hdr("Content-Type", "application/json", "X-Telegram-Bot-Api-Secret-Token", tgSecret),
		check:        nil, // the secret itself: checked by the relay, not forwarded
		secretHeader: "X-Telegram-Bot-Api-Secret-Token",
	})

	// Linear: hex HMAC-SHA256 of the body, millisecond timestamps (constructed event).
	lnSecret := "lin_wh_test_secret"
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	lnBody := []byte(`{"action":"create","type":"Issue","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9","title":"Relay test"},"url":"https://linear.app/x/issue/ENG-1","createdAt":"2026-02-16T10:00:00.000Z","webhookTimestamp":` + ms + `,"webhookId":"000042e3-d123-4980-b49f-8e140eef9329","organizationId":"org-1"}`)
	cases = append(cases, providerCase{
		source: "linear", secret: lnSecret, body: lnBody,
		header: hdr("Content-Type", "application/json; charset=utf-8", "Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72",
			"Linear-Event", "Issue", "Linear-Timestamp", ms, "Linear-Signature", hexMAC(sha256.New, lnSecret, string(lnBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("Linear-Signature")), []byte(hexMAC(sha256.New, lnSecret, string(b))))
		},
	})

	// Vercel: hex HMAC-SHA1 of the body (constructed deployment event).
	vcSecret := "vercel-client-secret"
	vcBody := []byte(`{"id":"uev_Wc2ZnfhVz6xcmGHrJqtXrxxx","type":"deployment.succeeded","createdAt":1771236000000,"region":"iad1","payload":{"deployment":{"id":"dpl_1","url":"x.vercel.app"}}}`)
	cases = append(cases, providerCase{
		source: "vercel", secret: vcSecret, body: vcBody,
		header: hdr("Content-Type", "application/json", "x-vercel-signature", hexMAC(sha1.New, vcSecret, string(vcBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("x-vercel-signature")), []byte(hexMAC(sha1.New, vcSecret, string(b))))
		},
	})

	// Twilio: base64 HMAC-SHA1 of the public URL plus the sorted form
	// parameters (constructed SMS status callback).
	twToken := "12345-twilio-auth-token"
	twURL := publicURL + "/api/webhooks/" + hostID + "/twilio?account=ac1"
	form := url.Values{"MessageSid": {"SM1234567890abcdef"}, "MessageStatus": {"delivered"}, "To": {"+15558675310"}, "Body": {"Hej d\u00e5 & v\u00e4lkommen"}}
	twBody := []byte(form.Encode())
	twilioData := func(u string, body []byte) string {
		v, _ := url.ParseQuery(string(body))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var sb strings.Builder
		sb.WriteString(u)
		for _, k := range keys {
			vals := append([]string(nil), v[k]...)
			sort.Strings(vals)
			for _, val := range vals {
				sb.WriteString(k + val)
			}
		}
		return sb.String()
	}
	cases = append(cases, providerCase{
		source: "twilio", secret: twToken, body: twBody,
		header: hdr("Content-Type", "application/x-www-form-urlencoded", "I-Twilio-Idempotency-Token", "c8e51b4f-9f6e-4c4e-b3c6-6a0a1ee4b7a1",
			"X-Twilio-Signature", b64MAC(sha1.New, []byte(twToken), twilioData(twURL, twBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("X-Twilio-Signature")), []byte(b64MAC(sha1.New, []byte(twToken), twilioData(twURL, b))))
		},
		wantReply: "<Response></Response>",
	})

	// Discord: Ed25519 over timestamp ‖ body with the application's key;
	// the source's secret is the public key. A PING is answered in place.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	dcHeaders := func(body []byte) http.Header {
		return hdr("Content-Type", "application/json", "X-Signature-Timestamp", ts,
			"X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(priv, append([]byte(ts), body...))))
	}
	dcCheck := func(h http.Header, b []byte) bool {
		sig, err := hex.DecodeString(h.Get("X-Signature-Ed25519"))
		return err == nil && ed25519.Verify(pub, append([]byte(h.Get("X-Signature-Timestamp")), b...), sig)
	}
	dcBody := []byte(`{"type":2,"id":"1195566428513652806","application_id":"1195566080516452433","token":"aW50ZXJhY3Rpb24","data":{"id":"1","name":"deploy","type":1},"channel_id":"1","guild_id":"2"}`)
	cases = append(cases, providerCase{source: "discord", secret: hex.EncodeToString(pub), body: dcBody,
		header: dcHeaders(dcBody), check: dcCheck, wantReply: `"type":5`})
	dcPing := []byte(`{"type":1,"id":"1195566428513652807","application_id":"1195566080516452433","token":"cGluZw","version":1}`)
	cases = append(cases, providerCase{source: "discord-ping", provider: "discord", secret: hex.EncodeToString(pub), body: dcPing,
		header: dcHeaders(dcPing), check: dcCheck, handshake: true, wantReply: `{"type":1}`})

	// Generic: HMAC-SHA256 hex in X-Signature, event id in X-Event-Id.
	gnSecret := "internal-shared-secret"
	gnBody := []byte("{\"job\":\"nightly\",\"ok\":true}\r\n")
	cases = append(cases, providerCase{
		source: "internal", provider: "generic", secret: gnSecret, body: gnBody,
		header: hdr("Content-Type", "application/json", "X-Event-Id", "job-42",
			"X-Signature", "sha256="+hexMAC(sha256.New, gnSecret, string(gnBody))),
		check: func(h http.Header, b []byte) bool {
			return hmac.Equal([]byte(h.Get("X-Signature")), []byte("sha256="+hexMAC(sha256.New, gnSecret, string(b))))
		},
	})
	return cases
}

// TestProvidersEndToEnd sends, for every provider, a webhook signed the
// provider's way through the real cloud and host: each arrives at the local
// app byte-exact with the provider's headers and passes the provider's own
// check there; handshakes are answered in place and never delivered.
func TestProvidersEndToEnd(t *testing.T) {
	c := startCloud(t, "sqlite:"+filepath.Join(t.TempDir(), "cloud.db"))
	hostID, code := c.newHost("providers", "unused-github-secret")
	cases := providerCases(t, c.url, hostID)

	var names []string
	for _, pc := range cases {
		provider := pc.provider
		if provider == "" {
			provider = pc.source
		}
		status := c.admin("PUT", "/api/hosts/"+hostID+"/sources/"+pc.source,
			map[string]any{"provider": provider, "secrets": []string{pc.secret}}, nil)
		require.Equal(t, 201, status, pc.source)
		if !pc.handshake {
			names = append(names, pc.source)
		}
	}
	rc := startReceiver(t)
	claimAndStartHost(t, c.url, code, rc.url, names...)

	for _, pc := range cases {
		req, err := http.NewRequest("POST", c.url+"/api/webhooks/"+hostID+"/"+pc.source, bytes.NewReader(pc.body))
		require.NoError(t, err)
		if pc.source == "twilio" {
			req.URL.RawQuery = "account=ac1"
		}
		req.Header = pc.header.Clone()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantStatus := 200
		if pc.provider == "generic" {
			wantStatus = 202
		}
		require.Equal(t, wantStatus, resp.StatusCode, "%s: %s", pc.source, answer)
		if pc.wantReply != "" {
			require.Contains(t, string(answer), pc.wantReply, pc.source)
		}
		if !pc.handshake && pc.wantReply == "" {
			require.Contains(t, string(answer), `"status":"queued"`, pc.source)
		}
	}

	want := len(names)
	eventually(t, 30*time.Second, fmt.Sprintf("%d deliveries at the local app", want), func() bool { return rc.count() >= want })
	bySource := map[string]received{}
	for _, rs := range rc.snapshot() {
		require.Len(t, rs, 1, "each delivered once")
		bySource[rs[0].Header.Get("X-Relay-Source")] = rs[0]
	}
	for _, pc := range cases {
		got, ok := bySource[pc.source]
		if pc.handshake {
			require.False(t, ok, "%s: a handshake is never delivered", pc.source)
			continue
		}
		require.True(t, ok, "%s delivered", pc.source)
		require.Equal(t, pc.body, got.Body, "%s: byte-exact", pc.source)
		for name := range pc.header {
			if name == http.CanonicalHeaderKey(pc.secretHeader) {
				require.Empty(t, got.Header.Get(name), "%s: %s carries the secret and stays in the cloud", pc.source, name)
				continue
			}
			require.Equal(t, pc.header.Get(name), got.Header.Get(name), "%s: header %s as the provider sent it", pc.source, name)
		}
		if pc.check != nil {
			require.True(t, pc.check(got.Header, got.Body), "%s: the local app's own signature check passes", pc.source)
		}
		require.Equal(t, got.Header.Get("Idempotency-Key"), got.Header.Get("X-Relay-Delivery-Id"), pc.source)
	}
	require.Len(t, c.deliveries(hostID, ""), want, "handshakes are not stored")
}
