package verify

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The building blocks the provider schemes share.

// --- MACs and comparisons -------------------------------------------------

func mac(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// hmacSHA256 computes HMAC-SHA256(key, parts...).
func hmacSHA256(key []byte, parts ...[]byte) []byte { return mac(sha256.New, key, parts...) }

// hmacSHA1 computes HMAC-SHA1(key, parts...).
func hmacSHA1(key []byte, parts ...[]byte) []byte { return mac(sha1.New, key, parts...) }

// anySecret reports whether check accepts any secret, trying every one so
// the time taken does not depend on which matched.
func anySecret(secrets [][]byte, check func(secret []byte) bool) error {
	if len(secrets) == 0 {
		return ErrNoSecrets
	}
	ok := false
	for _, s := range secrets {
		if check(s) {
			ok = true
		}
	}
	if !ok {
		return ErrMismatch
	}
	return nil
}

// matchBodyMAC checks a signature that is the HMAC of the raw body alone
// (GitHub, Shopify, Linear, Vercel, generic) against every secret.
func matchBodyMAC(secrets [][]byte, h func() hash.Hash, body, want []byte) error {
	return anySecret(secrets, func(s []byte) bool { return hmac.Equal(mac(h, s, body), want) })
}

// matchToken checks a shared-secret token (GitLab, Telegram, generic token
// mode) against every secret.
func matchToken(secrets [][]byte, token string) error {
	return anySecret(secrets, func(s []byte) bool { return equalToken(token, s) })
}

// equalAny compares want with every candidate signature in constant time,
// without stopping at the first match.
func equalAny(want []byte, sigs [][]byte) bool {
	ok := 0
	for _, s := range sigs {
		ok |= subtle.ConstantTimeCompare(want, s)
	}
	return ok == 1
}

// equalToken compares a shared-secret token with a secret in constant time.
// It compares digests, so the time taken reveals neither where they differ
// nor the secret's length.
func equalToken(got string, secret []byte) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// --- Encodings ------------------------------------------------------------

// decodeHex decodes exactly size bytes of hex (either case).
func decodeHex(s string, size int) ([]byte, bool) {
	if len(s) != 2*size {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// decodeBase64 decodes exactly size bytes of standard, padded, canonical
// base64.
func decodeBase64(s string, size int) ([]byte, bool) {
	if len(s) != base64.StdEncoding.EncodedLen(size) {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return b, err == nil && len(b) == size
}

// signature decodes value, the signature header called name, as exactly
// size bytes of encoding ("hex" or "base64"): ErrMissingSignature when it is
// empty, ErrMalformed when it does not decode.
func signature(name, value, encoding string, size int) ([]byte, error) {
	if value == "" {
		return nil, ErrMissingSignature
	}
	decode := decodeHex
	if encoding == "base64" {
		decode = decodeBase64
	}
	b, ok := decode(value, size)
	if !ok {
		return nil, fmt.Errorf("%s is not %d bytes of %s: %w", name, size, encoding, ErrMalformed)
	}
	return b, nil
}

// prefixedHex decodes "<prefix><hex of size bytes>", as GitHub sends.
func prefixedHex(sig, prefix string, size int) ([]byte, error) {
	hexed, ok := strings.CutPrefix(sig, prefix)
	if !ok {
		return nil, fmt.Errorf("no %q prefix: %w", prefix, ErrMalformed)
	}
	b, ok := decodeHex(hexed, size)
	if !ok {
		return nil, fmt.Errorf("not %d bytes of hex after %q: %w", size, prefix, ErrMalformed)
	}
	return b, nil
}

// --- Timestamps -----------------------------------------------------------

// parseDigits parses a timestamp header: ASCII digits only (no sign, no
// space), at most 18 of them so that it never overflows.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// parseUnix parses a timestamp in Unix seconds.
func parseUnix(s string) (time.Time, bool) {
	n, ok := parseDigits(s)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// checkWindow rejects a timestamp more than tolerance away from now, in the
// past (stale, a replay) or in the future.
func checkWindow(now, ts time.Time, tolerance time.Duration) error {
	switch d := now.Sub(ts); {
	case d > tolerance:
		return fmt.Errorf("timestamp %s old, over the %s tolerance: %w", d.Round(time.Millisecond), tolerance, ErrStale)
	case d < -tolerance:
		return fmt.Errorf("timestamp %s in the future, over the %s tolerance: %w", (-d).Round(time.Millisecond), tolerance, ErrStale)
	}
	return nil
}

// --- Header lists ---------------------------------------------------------

// item is one "key<sep>value" entry of a signature header.
type item struct{ key, value string }

// listItems splits a signature header into its entries: items separated by
// itemSep, each split from its value at the first kvSep. Stripe writes
// "t=1,v1=ab" (',' and '='), Standard Webhooks "v1,ab v1,cd" (' ' and ',').
// Surrounding spaces are trimmed; empty entries and entries without kvSep
// are dropped.
func listItems(header string, itemSep, kvSep byte) []item {
	var items []item
	for entry := range strings.SplitSeq(header, string(itemSep)) {
		entry = strings.TrimSpace(entry)
		k, v, ok := strings.Cut(entry, string(kvSep))
		if !ok || k == "" {
			continue
		}
		items = append(items, item{key: k, value: v})
	}
	return items
}

// --- Body fields ----------------------------------------------------------

// fields are the top-level members of a JSON object body.
type fields map[string]json.RawMessage

// jsonObject finds a JSON object's top-level members (topMembers);
// anything else yields nil.
func jsonObject(b []byte) fields { return topMembers(b) }

// isForm reports whether the request carries a form-encoded body.
func isForm(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// formValues parses a form body leniently: a malformed pair is skipped, the
// rest kept.
func formValues(body []byte) url.Values {
	v, _ := url.ParseQuery(string(body))
	return v
}

// bodyFields decodes a JSON body, or the JSON in a form body's "payload"
// parameter (GitHub's content type form, Slack interactivity). Other bodies
// yield nil.
func bodyFields(r *Request) fields {
	if isForm(r.Header) {
		p := formValues(r.Body).Get("payload")
		if p == "" {
			return nil
		}
		return jsonObject([]byte(p))
	}
	return jsonObject(r.Body)
}

// bodyAction is what bodyFields(r).str("action") is, without keeping the
// body's other members: the one field most events are named by, read on
// every webhook.
func bodyAction(r *Request) string {
	b := r.Body
	if isForm(r.Header) {
		b = []byte(formValues(r.Body).Get("payload"))
	}
	raw, ok := topMember(b, "action")
	if !ok {
		return ""
	}
	return fields{"action": raw}.str("action")
}

// raw follows a path of member names (or array indexes) into the body.
func (f fields) raw(path ...string) json.RawMessage {
	if f == nil || len(path) == 0 {
		return nil
	}
	cur, ok := f[path[0]]
	for _, key := range path[1:] {
		if !ok {
			return nil
		}
		if i, err := strconv.Atoi(key); err == nil {
			var arr []json.RawMessage
			if json.Unmarshal(cur, &arr) != nil || i < 0 || i >= len(arr) {
				return nil
			}
			cur = arr[i]
			continue
		}
		var obj fields
		if json.Unmarshal(cur, &obj) != nil {
			return nil
		}
		cur, ok = obj[key]
	}
	if !ok {
		return nil
	}
	return cur
}

// str returns a member as a string: strings verbatim, numbers as written,
// anything else "".
func (f fields) str(path ...string) string {
	raw := f.raw(path...)
	if raw == nil {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// has reports whether a member is present (even as null).
func (f fields) has(path ...string) bool { return f.raw(path...) != nil }

// idOrHash is the provider's event id, or BodyHashID where it sent none.
func idOrHash(id string, body []byte) string {
	if id != "" {
		return id
	}
	return BodyHashID(body)
}

// firstOf returns the first non-empty value.
func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// --- Options --------------------------------------------------------------

// optionSpec lists the options a provider takes, each with its check;
// every provider takes forward_headers too (ForwardOption), and every
// Untimed provider replay_guard (ReplayGuardOption).
type optionSpec map[string]func(value string) error

// check validates a source's options against the spec.
func (spec optionSpec) check(provider string, opts map[string]string) error {
	names := make([]string, 0, len(opts))
	for k := range opts {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		check, ok := spec[k]
		switch k {
		case ForwardOption:
			check, ok = checkForwardHeaders, true
		case ReplayGuardOption:
			check, ok = func(v string) error { return checkReplayGuard(provider, v) }, true
		}
		if !ok {
			known := []string{ForwardOption}
			if p, found := registry[provider]; found && isUntimed(p) {
				known = append(known, ReplayGuardOption)
			}
			for n := range spec {
				known = append(known, n)
			}
			sort.Strings(known)
			return fmt.Errorf("%s: unknown option %q (known: %s)", provider, k, strings.Join(known, ", "))
		}
		if err := check(opts[k]); err != nil {
			return fmt.Errorf("%s: option %s: %w", provider, k, err)
		}
	}
	return nil
}

// oneOf accepts exactly the listed values.
func oneOf(allowed ...string) func(string) error {
	return func(v string) error {
		for _, a := range allowed {
			if v == a {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// headerName accepts a valid HTTP header field name.
func headerName(v string) error {
	if v == "" {
		return fmt.Errorf("empty header name")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return fmt.Errorf("%q is not a valid header name", v)
	}
	return nil
}
