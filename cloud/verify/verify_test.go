package verify

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

type vector struct {
	Name       string            `json:"name"`
	Provider   string            `json:"provider"`
	Secret     string            `json:"secret"`
	Headers    map[string]string `json:"headers"`
	BodyBase64 string            `json:"body_base64"`
	Expect     string            `json:"expect"`
	Reason     string            `json:"reason"`
}

func loadVectors(t *testing.T, file string) []vector {
	b, err := os.ReadFile("testdata/" + file)
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(b, &vs))
	require.NotEmpty(t, vs)
	return vs
}

func request(headers map[string]string, body []byte) *Request {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	return &Request{Header: h, Body: body}
}

func TestGitHubVectors(t *testing.T) {
	p, ok := Lookup("github")
	require.True(t, ok)
	for _, v := range loadVectors(t, "github.json") {
		t.Run(v.Name, func(t *testing.T) {
			body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
			require.NoError(t, err)
			err = p.Verify(request(v.Headers, body), [][]byte{[]byte(v.Secret)}, nil)
			if v.Expect == "valid" {
				require.NoError(t, err, v.Reason)
				// Any changed byte, and any other secret, must fail.
				changed := append([]byte{}, body...)
				changed[len(changed)/2] ^= 0x01
				require.ErrorIs(t, p.Verify(request(v.Headers, changed), [][]byte{[]byte(v.Secret)}, nil), ErrMismatch)
				require.ErrorIs(t, p.Verify(request(v.Headers, body), [][]byte{[]byte(v.Secret + "x")}, nil), ErrMismatch)
				// Rotation: the right secret among others still verifies.
				require.NoError(t, p.Verify(request(v.Headers, body), [][]byte{[]byte("old"), []byte(v.Secret)}, nil))
			} else {
				require.Error(t, err, v.Reason)
			}
		})
	}
}

func sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestGitHubRejects(t *testing.T) {
	p, _ := Lookup("github")
	body := []byte(`{"action":"opened"}`)
	secret := [][]byte{[]byte("s")}
	good := "sha256=" + sign(secret[0], body)
	cases := []struct {
		name    string
		headers map[string]string
		want    error
	}{
		{"no header", nil, ErrMissingSignature},
		{"no prefix", map[string]string{"X-Hub-Signature-256": good[7:]}, ErrMalformed},
		{"wrong prefix", map[string]string{"X-Hub-Signature-256": "sha1=" + good[7:]}, ErrMalformed},
		{"not hex", map[string]string{"X-Hub-Signature-256": "sha256=" + string(make([]byte, 64))}, ErrMalformed},
		{"short", map[string]string{"X-Hub-Signature-256": good[:len(good)-2]}, ErrMalformed},
		{"upper hex is the same bytes", map[string]string{"X-Hub-Signature-256": "sha256=" + upper(good[7:])}, nil},
		{"sha1 not enabled", map[string]string{"X-Hub-Signature": "sha1=" + sha1hex(secret[0], body)}, ErrMissingSignature},
	}
	for _, c := range cases {
		err := p.Verify(request(c.headers, body), secret, nil)
		if c.want == nil {
			require.NoError(t, err, c.name)
		} else {
			require.ErrorIs(t, err, c.want, c.name)
		}
	}
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Hub-Signature-256": good}, body), nil, nil), ErrNoSecrets)
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 32
		}
	}
	return string(b)
}

func TestGitHubEvent(t *testing.T) {
	p, _ := Lookup("github")
	e := p.Event(request(map[string]string{"X-GitHub-Delivery": "abc", "X-GitHub-Event": "pull_request"}, []byte(`{"action":"opened","number":1}`)), nil)
	require.Equal(t, Event{ID: "abc", Type: "pull_request", Action: "opened"}, e)

	form := []byte("payload=%7B%22action%22%3A%22closed%22%7D")
	e = p.Event(request(map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "issues"}, form), nil)
	require.Equal(t, "closed", e.Action)
	require.Equal(t, BodyHashID(form), e.ID)
	require.Len(t, e.ID, 16)
}

func TestGeneric(t *testing.T) {
	p, ok := Lookup("generic")
	require.True(t, ok)
	body := []byte(`{"type":"invoice.created","id":1}`)
	secret := []byte("k")
	hexSig := sign(secret, body)
	raw, _ := hex.DecodeString(hexSig)

	require.NoError(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, body), [][]byte{secret}, nil))
	require.NoError(t, p.Verify(request(map[string]string{"X-Signature": "sha256=" + hexSig}, body), [][]byte{secret}, nil))
	require.ErrorIs(t, p.Verify(request(nil, body), [][]byte{secret}, nil), ErrMissingSignature)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": "zz"}, body), [][]byte{secret}, nil), ErrMalformed)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, append(body, ' ')), [][]byte{secret}, nil), ErrMismatch)

	b64 := map[string]string{"signature_header": "X-Hook-Sig", "encoding": "base64"}
	require.NoError(t, p.Verify(request(map[string]string{"X-Hook-Sig": base64.StdEncoding.EncodeToString(raw)}, body), [][]byte{secret}, b64))
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, body), [][]byte{secret}, b64), ErrMissingSignature)

	tok := map[string]string{"mode": "token"}
	require.NoError(t, p.Verify(request(map[string]string{"X-Webhook-Secret": "k"}, body), [][]byte{secret}, tok))
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Webhook-Secret": "kk"}, body), [][]byte{secret}, tok), ErrMismatch)

	e := p.Event(request(map[string]string{"X-Event-Id": "e1"}, body), nil)
	require.Equal(t, Event{ID: "e1", Type: "invoice.created"}, e)
	e = p.Event(request(map[string]string{"Idempotency-Key": "k2", "X-Event-Type": "t"}, body), nil)
	require.Equal(t, Event{ID: "k2", Type: "t"}, e)
	e = p.Event(request(nil, []byte("plain")), nil)
	require.Equal(t, BodyHashID([]byte("plain")), e.ID)
}

func TestLookup(t *testing.T) {
	_, ok := Lookup("nope")
	require.False(t, ok)
	require.Contains(t, Names(), "github")
}

func sha1hex(secret, body []byte) string {
	m := hmac.New(sha1.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestGitHubLegacySHA1(t *testing.T) {
	p, _ := Lookup("github")
	body := []byte(`{}`)
	secret := [][]byte{[]byte("s")}
	on := map[string]string{"allow_sha1": "true"}
	sha1Only := map[string]string{"X-Hub-Signature": "sha1=" + sha1hex(secret[0], body)}
	require.NoError(t, p.Verify(request(sha1Only, body), secret, on))
	// A correct sha1 never rescues a wrong sha256 (downgrade).
	both := map[string]string{"X-Hub-Signature": sha1Only["X-Hub-Signature"], "X-Hub-Signature-256": "sha256=" + sign([]byte("other"), body)}
	require.ErrorIs(t, p.Verify(request(both, body), secret, on), ErrMismatch)
}
