package verify

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relaykit/relay/shared"
)

// Fuzz targets: one per verifier and one per header parser. Without -fuzz
// they run their seeds as ordinary tests; scripts/test.sh runs each briefly
// with -fuzz.

// splice changes body with the fuzzer's patch: odd pos inserts it, even pos
// overwrites as many bytes, at (pos/2) modulo the body's length.
func splice(body, patch []byte, pos uint) []byte {
	i := int((pos >> 1) % uint(len(body)+1))
	out := append(append([]byte{}, body[:i]...), patch...)
	rest := i
	if pos&1 == 0 {
		rest = min(i+len(patch), len(body))
	}
	return append(out, body[rest:]...)
}

// seedBodies are the small bodies of a provider's test vectors.
func seedBodies(f *testing.F, provider string) [][]byte {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		f.Fatal(err)
	}
	var bodies [][]byte
	for _, file := range files {
		vs, err := readVectors(filepath.Base(file))
		if err != nil {
			f.Fatal(err)
		}
		for _, v := range vs {
			if p, ok := Lookup(v.Provider); !ok || p.Name() != provider {
				continue
			}
			if body, err := base64.StdEncoding.DecodeString(v.BodyBase64); err == nil && len(body) <= 4096 {
				bodies = append(bodies, body)
			}
		}
	}
	return bodies
}

// seedVectors are a testdata file's vectors, for seeds.
func seedVectors(f *testing.F, file string) []vector {
	vs, err := readVectors(file)
	if err != nil {
		f.Fatal(err)
	}
	return vs
}

// fuzzVerify fuzzes the schemes signed by the named signers. For any input
// nothing panics; a body signed by the sender verifies; and the same headers
// with a changed body never verify unless the body is the same to the scheme.
// For a plain token scheme, a token verifies only if it is the secret.
func fuzzVerify(f *testing.F, names ...string) {
	for _, name := range names {
		s := signers[name]
		f.Add(s.body, []byte("x"), uint(0), "")
		f.Add(s.body, []byte{}, uint(3), "sha256=00")
		f.Add([]byte{}, []byte(" "), uint(1), "t=1,v1=00")
		for _, b := range seedBodies(f, s.provider) {
			f.Add(b, []byte("\n"), uint(len(b)*2+1), "v1,AAAA")
		}
		for h, v := range s.malformed {
			f.Add(s.body, []byte(h), uint(7), v)
		}
	}
	f.Fuzz(func(t *testing.T, body, patch []byte, pos uint, header string) {
		for _, name := range names {
			s := signers[name]
			p, _ := Lookup(s.provider)
			secrets := [][]byte{s.secrets[0]}

			// Whatever a header holds, nothing panics.
			for _, h := range s.signatureHeaders {
				r := s.request(0, s.body, testNow)
				r.Header.Set(h, header)
				err := p.Verify(r, secrets, s.opts)
				if !s.bodyBound && err == nil && header != string(s.secrets[0]) {
					t.Fatalf("%s: token %q accepted", name, header)
				}
			}
			if s.canSign != nil && !s.canSign(body) {
				continue
			}
			r := s.request(0, body, testNow)
			if err := p.Verify(r, secrets, s.opts); err != nil {
				t.Fatalf("%s: signed body %q refused: %v", name, body, err)
			}
			exercise(p, r, s.opts)

			changed := splice(body, patch, pos)
			r.Body = changed
			err := p.Verify(r, secrets, s.opts)
			exercise(p, r, s.opts)
			if !s.bodyBound || err != nil {
				continue
			}
			same := bytes.Equal(changed, body)
			if s.sameContent != nil {
				same = same || s.sameContent(body, changed)
			}
			if !same {
				t.Fatalf("%s: body signed as %q accepted as %q", name, body, changed)
			}
		}
	})
}

// exercise runs the rest of a provider's surface on a request, for panics,
// and checks that the event the intake takes is safe to carry.
func exercise(p Provider, r *Request, opts map[string]string) {
	if ev := EventOf(p, r, opts); ev.ID == "" || SafeEventID(ev.ID) != ev.ID ||
		len(ev.Type) > shared.MaxEventName || len(ev.Action) > shared.MaxEventName {
		panic(fmt.Sprintf("%s: unsafe event %+q", p.Name(), ev))
	}
	if ev := p.Event(r, opts); ev.Action != "" && !p.Actions() {
		panic(fmt.Sprintf("%s: an event with an action (%+q) from a provider whose events carry none (Actions)", p.Name(), ev))
	}
	if h, ok := p.(Handshaker); ok {
		h.Handshake(r)
	}
	if a, ok := p.(Acknowledger); ok {
		a.Ack(r)
	}
}

func FuzzGitHubVerify(f *testing.F)   { fuzzVerify(f, "github") }
func FuzzStripeVerify(f *testing.F)   { fuzzVerify(f, "stripe") }
func FuzzSlackVerify(f *testing.F)    { fuzzVerify(f, "slack") }
func FuzzStandardVerify(f *testing.F) { fuzzVerify(f, "standard") }
func FuzzShopifyVerify(f *testing.F)  { fuzzVerify(f, "shopify") }
func FuzzGitLabVerify(f *testing.F)   { fuzzVerify(f, "gitlab", "gitlab-signing-token") }
func FuzzTelegramVerify(f *testing.F) { fuzzVerify(f, "telegram") }
func FuzzLinearVerify(f *testing.F)   { fuzzVerify(f, "linear") }
func FuzzVercelVerify(f *testing.F)   { fuzzVerify(f, "vercel") }
func FuzzTwilioVerify(f *testing.F)   { fuzzVerify(f, "twilio-form", "twilio-json") }
func FuzzDiscordVerify(f *testing.F)  { fuzzVerify(f, "discord") }
func FuzzGenericVerify(f *testing.F)  { fuzzVerify(f, "generic", "generic-token") }

// FuzzStripeHeader: a Stripe-Signature that parses has one numeric t and
// only well-formed v1 values; verifying with any header never panics.
func FuzzStripeHeader(f *testing.F) {
	for _, v := range seedVectors(f, "stripe.json") {
		f.Add(v.Headers["Stripe-Signature"])
	}
	f.Add("t=1,v1=")
	f.Add("t=,v1=" + strings.Repeat("a", 64))
	f.Add(",,= ,t=1=2")
	f.Fuzz(func(t *testing.T, header string) {
		sig, err := parseStripeSignature(header)
		if err == nil {
			n, ok := parseDigits(sig.timestamp)
			if !ok || sig.t.Unix() != n || len(sig.v1) == 0 {
				t.Fatalf("%q parsed as t=%q (%v), %d v1", header, sig.timestamp, sig.t, len(sig.v1))
			}
			for _, v := range sig.v1 {
				if len(v) != 32 {
					t.Fatalf("%q: v1 of %d bytes", header, len(v))
				}
			}
		}
		p, _ := Lookup("stripe")
		p.Verify(request(map[string]string{"Stripe-Signature": header}, []byte("{}")), [][]byte{[]byte("whsec_x")}, nil)
	})
}

// FuzzStandardSignatureHeader: list items never hold their separators, and
// verifying with any webhook-signature, -id and -timestamp never panics.
func FuzzStandardSignatureHeader(f *testing.F) {
	for _, v := range seedVectors(f, "standard-webhooks.json") {
		f.Add(v.Headers["webhook-signature"], v.Headers["webhook-id"], v.Headers["webhook-timestamp"])
	}
	f.Add("v1,", "", "")
	f.Add(" , v1a,x v1,,", "a.b", "-1")
	f.Fuzz(func(t *testing.T, header, id, ts string) {
		for _, it := range listItems(header, ' ', ',') {
			if it.key == "" || strings.ContainsAny(it.key, ", ") || strings.Contains(it.value, " ") {
				t.Fatalf("%q gave item %q=%q", header, it.key, it.value)
			}
		}
		for _, it := range listItems(header, ',', '=') {
			if it.key == "" || strings.ContainsAny(it.key, ",=") || strings.Contains(it.value, ",") {
				t.Fatalf("%q gave item %q=%q", header, it.key, it.value)
			}
		}
		r := request(map[string]string{"webhook-signature": header, "webhook-id": id, "webhook-timestamp": ts}, []byte("{}"))
		for _, name := range []string{"standard", "gitlab"} {
			p, _ := Lookup(name)
			p.Verify(r, [][]byte{[]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), []byte("not base64")}, nil)
			p.Event(r, nil)
		}
	})
}

// FuzzTimestamp: a timestamp parses only as plain decimal digits, to the
// number they spell.
func FuzzTimestamp(f *testing.F) {
	for _, s := range []string{"1700000000", "1700000000123", "0", "007", "-1", "+1", "1e9", " 1", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseDigits(s)
		if !ok {
			return
		}
		if n < 0 || strings.TrimLeft(s, "0") != strings.TrimLeft(strconv.FormatInt(n, 10), "0") {
			t.Fatalf("%q parsed as %d", s, n)
		}
		if _, ok := parseUnix(s); !ok {
			t.Fatalf("%q: digits but no time", s)
		}
	})
}

// FuzzHexSignatureHeader: a prefixed hex signature (GitHub, Slack) parses to
// exactly the bytes it spells.
func FuzzHexSignatureHeader(f *testing.F) {
	f.Add("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	f.Add("v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	f.Add("sha256=")
	f.Add("v0=zz")
	f.Fuzz(func(t *testing.T, header string) {
		for _, prefix := range []string{"sha256=", "v0="} {
			b, err := prefixedHex(header, prefix, 32)
			if err != nil {
				continue
			}
			if len(b) != 32 || !strings.EqualFold(prefix+hex.EncodeToString(b), header) {
				t.Fatalf("%q parsed as %x", header, b)
			}
		}
	})
}

// FuzzTwilioURL: the URL variants are the URL itself, then at most one other
// that differs from it only by a ":port" added or removed.
func FuzzTwilioURL(f *testing.F) {
	for _, v := range seedVectors(f, "twilio.json") {
		f.Add(v.URL)
	}
	f.Add("https://[::1]:8443/a?b=c:d")
	f.Add("http://u@h:/")
	f.Add("://")
	f.Fuzz(func(t *testing.T, raw string) {
		urls := twilioURLs(raw)
		if len(urls) == 0 || urls[0] != raw || len(urls) > 2 {
			t.Fatalf("%q gave %q", raw, urls)
		}
		if len(urls) == 2 {
			short, long := urls[0], urls[1]
			if len(short) > len(long) {
				short, long = long, short
			}
			i := 0
			for i < len(short) && short[i] == long[i] {
				i++
			}
			added := long[i : i+len(long)-len(short)]
			if long[:i]+long[i+len(added):] != short || !strings.HasPrefix(added, ":") {
				t.Fatalf("%q gave %q: differs by %q", raw, urls, added)
			}
			if _, ok := parseDigits(added[1:]); !ok && added != ":" {
				t.Fatalf("%q gave %q: %q is no port", raw, urls, added)
			}
		}
		p, _ := Lookup("twilio")
		r := request(map[string]string{"X-Twilio-Signature": "RSOYDt4T1cUTdK1PDd93/VVr8B8=", "Content-Type": formType}, []byte("a=1"))
		r.URL = raw
		p.Verify(r, [][]byte{[]byte("12345")}, nil)
	})
}

// FuzzTopMember: on every valid JSON body, topMember and topMembers find
// what decoding the body into a map finds.
func FuzzTopMember(f *testing.F) {
	for _, s := range []string{`{"action":"opened","x":[1,{"action":2}]}`, `{"a":"\"}","action" : "x\u0041" }`,
		`{"action":1,"action":"last"}`, `{"act\u0069on":true}`, `[]`, `{}`, ` {"b":null} `, `"action"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := topMember(b, "action")
		if !json.Valid(b) {
			return // no promise beyond not panicking
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil || m == nil {
			if ok {
				t.Fatalf("%q is no object, but topMember found %q", b, got)
			}
			return
		}
		want, has := m["action"]
		if ok != has || (has && !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want))) {
			t.Fatalf("%q: topMember = %q, %v; decoding = %q, %v", b, got, ok, want, has)
		}
		all := topMembers(b)
		if all == nil || len(all) != len(m) {
			t.Fatalf("%q: topMembers = %q; decoding = %q", b, all, m)
		}
		for k, v := range m {
			if !bytes.Equal(bytes.TrimSpace(all[k]), bytes.TrimSpace(v)) {
				t.Fatalf("%q: member %q: topMembers = %q; decoding = %q", b, k, all[k], v)
			}
		}
	})
}
