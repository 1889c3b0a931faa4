package verify

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func sign(secret, body []byte) string { return hex.EncodeToString(sha256MAC(secret, string(body))) }

func sha1hex(secret, body []byte) string { return hex.EncodeToString(sha1MAC(secret, string(body))) }

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 32
		}
	}
	return string(b)
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
		requireVerdict(t, err, c.want, c.name)
	}
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Hub-Signature-256": good}, body), nil, nil), ErrNoSecrets)
}

func TestGitHubLegacySHA1(t *testing.T) {
	p, _ := Lookup("github")
	body := []byte(`{}`)
	secret := [][]byte{[]byte("s")}
	on := map[string]string{"allow_sha1": "true"}
	sha1Only := map[string]string{"X-Hub-Signature": "sha1=" + sha1hex(secret[0], body)}
	require.NoError(t, p.Verify(request(sha1Only, body), secret, on))
	require.NoError(t, p.Verify(request(sha1Only, body), [][]byte{[]byte("old"), secret[0]}, on), "rotation")
	require.ErrorIs(t, p.Verify(request(sha1Only, []byte(`{ }`)), secret, on), ErrMismatch)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Hub-Signature": "sha256=" + sign(secret[0], body)}, body), secret, on), ErrMalformed)
	// A correct sha1 never rescues a wrong sha256 (downgrade).
	both := map[string]string{"X-Hub-Signature": sha1Only["X-Hub-Signature"], "X-Hub-Signature-256": "sha256=" + sign([]byte("other"), body)}
	require.ErrorIs(t, p.Verify(request(both, body), secret, on), ErrMismatch)
	// The pre-SHA-1-removal vector carries both headers: sha256 decides.
	v, r := findVector(t, "github.json", "octokit-pretty-foo-bar-both-headers")
	require.NoError(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, on))
	r.Header.Del("X-Hub-Signature-256")
	require.NoError(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, on), "the vector's sha1 alone, opted in")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMissingSignature, "not opted in")
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

	// The action only from a top-level string member; anything else has none.
	for body, want := range map[string]string{
		`{"pull_request":{"action":"nested"},"action":"edited"}`: "edited",
		`{"pull_request":{"action":"nested"}}`:                   "",
		`{"action":null}`:                                        "",
		`{"action":{"a":1}}`:                                     "",
		`["action"]`:                                             "",
		`{"action":"opened"`:                                     "",
		`not json`:                                               "",
	} {
		e = p.Event(request(map[string]string{"X-GitHub-Event": "x"}, []byte(body)), nil)
		require.Equal(t, want, e.Action, body)
	}

	_, r := findVector(t, "github.json", "octokit-compact-foo-bar-sha256")
	require.Equal(t, Event{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Type: "ping"}, p.Event(r, nil))
}

func TestGitHubForm(t *testing.T) {
	// content_type=form: the HMAC covers the raw form bytes.
	p, _ := Lookup("github")
	body := []byte("payload=%7B%22action%22%3A%22opened%22%2C%22x%22%3A%22a+b%22%7D")
	secret := []byte("s")
	r := request(map[string]string{"Content-Type": "application/x-www-form-urlencoded",
		"X-Hub-Signature-256": "sha256=" + sign(secret, body)}, body)
	require.NoError(t, p.Verify(r, [][]byte{secret}, nil))
	r.Body = []byte("payload=%7B%22action%22%3A%22opened%22%2C%22x%22%3A%22a%20b%22%7D") // same form, other bytes
	require.ErrorIs(t, p.Verify(r, [][]byte{secret}, nil), ErrMismatch)
}

// An empty X-Hub-Signature-256 still decides: no falling back to sha1.
func TestGitHubEmptySHA256Header(t *testing.T) {
	p, _ := Lookup("github")
	body := []byte(`{}`)
	r := request(map[string]string{"X-Hub-Signature": "sha1=" + sha1hex([]byte("s"), body)}, body)
	r.Header["X-Hub-Signature-256"] = []string{""}
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte("s")}, map[string]string{"allow_sha1": "true"}), ErrMalformed)
}
