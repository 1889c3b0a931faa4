package verify

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A vector from testdata/<provider>.json (format in testdata/SOURCES.md).
type vector struct {
	Name       string            `json:"name"`
	Provider   string            `json:"provider"`
	Source     string            `json:"source"`
	Secret     string            `json:"secret"`
	Headers    map[string]string `json:"headers"`
	BodyBase64 string            `json:"body_base64"`
	NowUnix    int64             `json:"now_unix"`
	URL        string            `json:"url"`
	Expect     string            `json:"expect"`
	Reason     string            `json:"reason"`
}

// The failure each invalid vector must give. A new invalid vector needs an
// entry here.
var vectorFailures = map[string]error{
	"discord.json/ping-tampered":                   ErrMismatch,
	"gitlab.json/token-mismatch":                   ErrMismatch,
	"linear.json/comment-create-stale":             ErrStale,
	"shopify.json/wrong-secret":                    ErrMismatch,
	"standard-webhooks.json/lib-invalid-signature": ErrMismatch,
	"stripe.json/dotnet-event-tampered":            ErrMismatch,
	"telegram.json/secret-token-mismatch":          ErrMismatch,
	"twilio.json/wrong-signature":                  ErrMalformed, // "WRONG_SIGNATURE" is not base64
	"vercel.json/tampered-body":                    ErrMismatch,
}

func readVectors(file string) ([]vector, error) {
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		return nil, err
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return vs, nil
}

func loadVectors(t *testing.T, file string) []vector {
	t.Helper()
	vs, err := readVectors(file)
	require.NoError(t, err)
	require.NotEmpty(t, vs)
	return vs
}

// vectorRequest builds the request a vector describes.
func vectorRequest(t *testing.T, v vector) *Request {
	t.Helper()
	body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
	require.NoError(t, err)
	r := request(v.Headers, body)
	r.URL = v.URL
	if v.NowUnix != 0 {
		r.Now = time.Unix(v.NowUnix, 0)
	}
	return r
}

// findVector returns one named vector of a file.
func findVector(t *testing.T, file, name string) (vector, *Request) {
	t.Helper()
	for _, v := range loadVectors(t, file) {
		if v.Name == name {
			return v, vectorRequest(t, v)
		}
	}
	t.Fatalf("no vector %s in %s", name, file)
	return vector{}, nil
}

// verifiedVector is provider's vector name (from provider.json), its request
// and its secret, which verifies it.
func verifiedVector(t *testing.T, provider, name string) (Provider, vector, *Request, [][]byte) {
	t.Helper()
	p, _ := Lookup(provider)
	v, r := findVector(t, provider+".json", name)
	secret := [][]byte{[]byte(v.Secret)}
	require.NoError(t, p.Verify(r, secret, nil))
	return p, v, r, secret
}

// requireVerdict requires err to be nil when want is, else to wrap want.
func requireVerdict(t *testing.T, err, want error, msgAndArgs ...any) {
	t.Helper()
	if want == nil {
		require.NoError(t, err, msgAndArgs...)
	} else {
		require.ErrorIs(t, err, want, msgAndArgs...)
	}
}

func request(headers map[string]string, body []byte) *Request {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	return &Request{Header: h, Body: body, Now: testNow}
}

// testNow is the clock of constructed requests.
var testNow = time.Unix(1700000000, 0)

// bodyBound reports whether a vector's signature covers its body: not for
// Telegram's secret token nor GitLab's classic token.
func bodyBound(v vector) bool {
	if v.Provider == "telegram" {
		return false
	}
	if v.Provider == "gitlab" {
		_, signed := v.Headers["webhook-signature"]
		return signed
	}
	return true
}

// TestVectors runs every vector of every testdata file: valid ones verify
// (and fail once the body or the secret changes), invalid ones fail with
// their expected class.
func TestVectors(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.Len(t, files, 11)
	seen := map[string]bool{}
	total := 0
	for _, file := range files {
		file = filepath.Base(file)
		for _, v := range loadVectors(t, file) {
			key := file + "/" + v.Name
			require.False(t, seen[key], "duplicate vector %s", key)
			seen[key] = true
			total++
			t.Run(key, func(t *testing.T) {
				p, ok := Lookup(v.Provider)
				require.True(t, ok, "provider %q", v.Provider)
				r := vectorRequest(t, v)
				secrets := [][]byte{[]byte(v.Secret)}
				err := p.Verify(r, secrets, nil)
				if v.Expect == "invalid" {
					want, ok := vectorFailures[key]
					require.True(t, ok, "invalid vector %s needs an expected failure in vectorFailures", key)
					require.ErrorIs(t, err, want, v.Reason)
					requireNoLeak(t, err, v.Secret)
					return
				}
				require.Equal(t, "valid", v.Expect)
				require.NoError(t, err, v.Reason)

				// Rotation: the right secret among others still verifies.
				require.NoError(t, p.Verify(r, [][]byte{[]byte("old-secret"), []byte(v.Secret)}, nil))
				// Another secret fails.
				other := otherSecret(v)
				err = p.Verify(r, [][]byte{other}, nil)
				require.ErrorIs(t, err, ErrMismatch)
				requireNoLeak(t, err, v.Secret)
				// Any changed byte fails where the body is signed.
				if bodyBound(v) {
					for _, i := range []int{0, len(r.Body) / 2, len(r.Body) - 1} {
						changed := *r
						changed.Body = slices.Clone(r.Body)
						changed.Body[i] ^= 0x01
						require.Error(t, p.Verify(&changed, secrets, nil), "byte %d changed", i)
					}
					longer := *r
					longer.Body = append(slices.Clone(r.Body), '\n')
					require.Error(t, p.Verify(&longer, secrets, nil), "newline added")
				}
				require.NotEmpty(t, p.Event(r, nil).ID)
			})
		}
	}
	require.Len(t, vectorFailures, countInvalid(t, files), "vectorFailures names a vector that no longer exists")
	t.Logf("%d vectors", total)
}

func countInvalid(t *testing.T, files []string) int {
	n := 0
	for _, f := range files {
		for _, v := range loadVectors(t, filepath.Base(f)) {
			if v.Expect == "invalid" {
				n++
			}
		}
	}
	return n
}

// otherSecret is a secret of the same shape as the vector's that is not it.
func otherSecret(v vector) []byte {
	switch v.Provider {
	case "discord": // another valid public key
		return []byte(testDiscordKeys[1].public)
	case "standard-webhooks":
		return []byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 24 byt")))
	}
	return []byte(v.Secret + "x")
}

// requireNoLeak checks that an error tells neither the secret nor anything
// derived from it.
func requireNoLeak(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if len(s) >= 4 {
			require.NotContains(t, err.Error(), s, "error message leaks a secret")
		}
	}
}

func TestNamesAndLookup(t *testing.T) {
	require.Equal(t, []string{"discord", "generic", "github", "gitlab", "linear", "shopify", "slack",
		"standard", "stripe", "telegram", "twilio", "vercel"}, Names())
	for _, n := range Names() {
		p, ok := Lookup(n)
		require.True(t, ok)
		require.Equal(t, n, p.Name())
		require.Positive(t, p.MaxBody())
		require.GreaterOrEqual(t, p.SuccessStatus(), 200)
		require.Less(t, p.SuccessStatus(), 300)
		_, ok = p.(OptionsChecker)
		require.True(t, ok, "%s checks its options", n)
	}
	for _, alias := range []string{"standard-webhooks", "svix"} {
		p, ok := Lookup(alias)
		require.True(t, ok)
		require.Equal(t, "standard", p.Name())
	}
	_, ok := Lookup("nope")
	require.False(t, ok)
	_, ok = Lookup("")
	require.False(t, ok)
}

func TestRetries(t *testing.T) {
	noRetry := []string{"discord", "github", "gitlab", "telegram", "twilio"}
	for _, n := range Names() {
		p, _ := Lookup(n)
		require.Equal(t, !slices.Contains(noRetry, n), p.Retries(), n)
	}
}

func TestOptionalInterfaces(t *testing.T) {
	implements := func(check func(Provider) bool) []string {
		var names []string
		for _, n := range Names() {
			p, _ := Lookup(n)
			if check(p) {
				names = append(names, n)
			}
		}
		return names
	}
	require.Equal(t, []string{"discord", "slack"}, implements(func(p Provider) bool { _, ok := p.(Handshaker); return ok }))
	require.Equal(t, []string{"discord", "twilio"}, implements(func(p Provider) bool { _, ok := p.(Acknowledger); return ok }))
	require.Equal(t, []string{"discord", "gitlab", "standard", "telegram"}, implements(func(p Provider) bool { _, ok := p.(SecretChecker); return ok }))
}

func TestCheckOptions(t *testing.T) {
	for _, n := range Names() {
		p, _ := Lookup(n)
		c := p.(OptionsChecker)
		require.NoError(t, c.CheckOptions(nil), n)
		require.NoError(t, c.CheckOptions(map[string]string{}), n)
		err := c.CheckOptions(map[string]string{"no_such_option": "1"})
		require.ErrorContains(t, err, "no_such_option", n)
		require.ErrorContains(t, err, n, "the message names the provider")
	}
	gh, _ := Lookup("github")
	require.NoError(t, gh.(OptionsChecker).CheckOptions(map[string]string{"allow_sha1": "true"}))
	require.NoError(t, gh.(OptionsChecker).CheckOptions(map[string]string{"allow_sha1": "false"}))
	require.ErrorContains(t, gh.(OptionsChecker).CheckOptions(map[string]string{"allow_sha1": "yes"}), "allow_sha1")

	g, _ := Lookup("generic")
	gc := g.(OptionsChecker)
	require.NoError(t, gc.CheckOptions(map[string]string{"signature_header": "X-Hook-Sig", "encoding": "base64",
		"mode": "hmac", "event_id_header": "X-Id", "event_type_header": "X-Type"}))
	require.NoError(t, gc.CheckOptions(map[string]string{"mode": "token"}))
	require.ErrorContains(t, gc.CheckOptions(map[string]string{"encoding": "base32"}), "encoding")
	require.ErrorContains(t, gc.CheckOptions(map[string]string{"mode": "jwt"}), "mode")
	require.ErrorContains(t, gc.CheckOptions(map[string]string{"signature_header": "X Sig"}), "signature_header")
	require.ErrorContains(t, gc.CheckOptions(map[string]string{"event_id_header": ""}), "event_id_header")
	err := gc.CheckOptions(map[string]string{"secret": "x"})
	require.ErrorContains(t, err, "known: encoding, event_id_header, event_type_header, forward_headers, mode, signature_header")
}

func TestBodyHashID(t *testing.T) {
	require.Equal(t, "e3b0c44298fc1c14", BodyHashID(nil))
	require.Len(t, BodyHashID([]byte("x")), 16)
}

func TestCheckWindow(t *testing.T) {
	tol := 5 * time.Minute
	require.NoError(t, checkWindow(testNow, testNow, tol))
	require.NoError(t, checkWindow(testNow, testNow.Add(-tol), tol), "exactly the tolerance old")
	require.NoError(t, checkWindow(testNow, testNow.Add(tol), tol), "exactly the tolerance ahead")
	err := checkWindow(testNow, testNow.Add(-tol-time.Second), tol)
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "old")
	err = checkWindow(testNow, testNow.Add(tol+time.Second), tol)
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "future")
	require.ErrorIs(t, checkWindow(testNow, time.Unix(0, 0), tol), ErrStale)
}

func TestParseDigits(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "1700000000": 1700000000, "000123": 123, "999999999999999999": 999999999999999999} {
		n, ok := parseDigits(s)
		require.True(t, ok, s)
		require.Equal(t, want, n)
	}
	for _, s := range []string{"", "-1", "+1", " 1", "1 ", "1.5", "1e9", "0x10", "9999999999999999999", "١٢٣"} {
		_, ok := parseDigits(s)
		require.False(t, ok, s)
	}
}

func TestListItems(t *testing.T) {
	require.Equal(t, []item{{"t", "1"}, {"v1", "ab"}, {"v1", "c=d"}},
		listItems(" t=1 , v1=ab,,junk,=x,v1=c=d", ',', '='))
	require.Equal(t, []item{{"v1", "a"}, {"v2", "b,c"}}, listItems("v1,a  v2,b,c v1", ' ', ','))
	require.Empty(t, listItems("", ',', '='))
}

func TestFields(t *testing.T) {
	f := jsonObject([]byte(`{"a":{"b":[{"c":"x"},{"c":12345678901234567890}]},"n":null,"s":"str","t":true}`))
	require.Equal(t, "x", f.str("a", "b", "0", "c"))
	require.Equal(t, "12345678901234567890", f.str("a", "b", "1", "c"))
	require.Equal(t, "", f.str("a", "b", "2", "c"))
	require.Equal(t, "", f.str("a", "b", "-1", "c"))
	require.Equal(t, "", f.str("a", "missing", "c"))
	require.Equal(t, "", f.str("t"))
	require.Equal(t, "str", f.str("s"))
	require.Equal(t, "", f.str("s", "deeper"))
	require.True(t, f.has("n"))
	require.False(t, f.has("m"))
	require.Nil(t, jsonObject([]byte(`[1]`)))
	require.Equal(t, "", jsonObject([]byte("not json")).str("a"))
}

// The error values stay distinct, so callers can tell them apart in logs.
func TestErrorsDistinct(t *testing.T) {
	all := []error{ErrMissingSignature, ErrMalformed, ErrMismatch, ErrNoSecrets, ErrStale, ErrNoURL}
	for i, a := range all {
		for j, b := range all {
			require.Equal(t, i == j, errors.Is(a, b))
		}
		require.False(t, strings.ContainsAny(a.Error()[:1], "ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
	}
}
