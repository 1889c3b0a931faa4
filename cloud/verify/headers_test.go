package verify

import (
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Headers a sender may add to a request it holds a signature for, hoping
// the local app trusts them.
var forged = map[string]string{
	"X-Forwarded-User": "admin",
	"Authorization":    "Bearer forged",
	"Cookie":           "session=forged",
	"X-Injected":       "1",
	"X-Relay-Source":   "other",
}

// keptOf is what a filter keeps of h, secret headers left out as intake
// leaves them out.
func keptOf(f HeaderFilter, h http.Header, secret []string) http.Header {
	out := http.Header{}
	for k, vs := range h {
		if f.Keep(k) && !slices.ContainsFunc(secret, func(s string) bool { return http.CanonicalHeaderKey(s) == k }) {
			out[k] = vs
		}
	}
	return out
}

func TestEveryNamedProviderListsItsHeaders(t *testing.T) {
	for _, n := range Names() {
		p, _ := Lookup(n)
		_, ok := p.(HeaderSender)
		require.True(t, ok, "%s lists the headers it sends", n)
		f := ForwardedHeaders(p, nil)
		require.Equal(t, n == "generic", f.All(), "%s: only generic keeps every header by default", n)
		for _, h := range []string{"Content-Type", "content-encoding", "User-Agent"} {
			require.True(t, f.Keep(h), "%s keeps %s", n, h)
		}
		if n == "generic" {
			continue
		}
		for name := range forged {
			require.False(t, f.Keep(name), "%s drops a forged %s", n, name)
		}
		for _, s := range SecretHeaders(p, nil) {
			require.False(t, f.Keep(s), "%s: the secret header %s is not listed", n, s)
		}
	}
}

// TestForwardedHeadersKeepVectors: of every valid vector (the SDKs' own
// requests), each header is kept (unless it carries the secret), and what
// is kept still verifies and names the same event at the local app.
func TestForwardedHeadersKeepVectors(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	for _, file := range files {
		for _, v := range loadVectors(t, filepath.Base(file)) {
			if v.Expect != "valid" {
				continue
			}
			p, _ := Lookup(v.Provider)
			r := vectorRequest(t, v)
			secret := SecretHeaders(p, nil)
			f := ForwardedHeaders(p, nil)
			for k := range r.Header {
				if slices.ContainsFunc(secret, func(s string) bool { return http.CanonicalHeaderKey(s) == k }) {
					continue
				}
				require.True(t, f.Keep(k), "%s/%s: %s kept", file, v.Name, k)
			}
			for k, val := range forged {
				r.Header.Set(k, val)
			}
			kept := *r
			kept.Header = keptOf(f, r.Header, secret)
			for k := range forged {
				require.Empty(t, kept.Header.Values(k), "%s/%s: forged %s dropped", file, v.Name, k)
			}
			if len(secret) > 0 && r.Header.Get(secret[0]) != "" {
				continue // a token request: the token stays in the cloud
			}
			require.NoError(t, p.Verify(&kept, [][]byte{[]byte(v.Secret)}, nil), "%s/%s verifies with the kept headers", file, v.Name)
			require.Equal(t, p.Event(r, nil), p.Event(&kept, nil), "%s/%s", file, v.Name)
		}
	}
}

func TestGitHubHeaderFamily(t *testing.T) {
	gh, _ := Lookup("github")
	f := ForwardedHeaders(gh, nil)
	for _, h := range []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID", "X-Hub-Signature-256", "X-Hub-Signature",
		"X-GitHub-Hook-Installation-Target-Type", "X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Enterprise-Host"} {
		require.True(t, f.Keep(h), h)
	}
	require.False(t, f.Keep("X-GitHub-Forged"))
	require.False(t, f.Keep("X-GitHub-Hook-Installation-Target"), "the family is the prefix with its dash")
}

func TestForwardHeadersOption(t *testing.T) {
	gh, _ := Lookup("github")
	f := ForwardedHeaders(gh, map[string]string{ForwardOption: "X-Tenant, x-acme-*"})
	require.True(t, f.Keep("X-Tenant"))
	require.True(t, f.Keep("x-tenant"))
	require.True(t, f.Keep("X-Acme-Region"))
	require.True(t, f.Keep("X-GitHub-Event"), "the provider's own stay")
	require.False(t, f.Keep("X-Acme"))
	require.False(t, f.Keep("Authorization"))

	all := ForwardedHeaders(gh, map[string]string{ForwardOption: "*"})
	require.True(t, all.All())
	for name := range forged {
		require.True(t, all.Keep(name), "* keeps %s", name)
	}

	// Generic: every header, unless its source names a list; then the
	// headers its options read and the list.
	g, _ := Lookup("generic")
	require.True(t, ForwardedHeaders(g, nil).Keep("Authorization"))
	require.True(t, ForwardedHeaders(g, map[string]string{"mode": "token"}).Keep("X-Anything"))
	gl := ForwardedHeaders(g, map[string]string{ForwardOption: "X-Tenant"})
	require.False(t, gl.All())
	for _, h := range []string{"X-Tenant", "X-Signature", "X-Event-Id", "Idempotency-Key", "X-Event-Type", "Content-Type"} {
		require.True(t, gl.Keep(h), h)
	}
	require.False(t, gl.Keep("Authorization"))
	gc := ForwardedHeaders(g, map[string]string{ForwardOption: "X-Tenant", "signature_header": "X-Hook-Sig",
		"event_id_header": "X-Id", "event_type_header": "X-Kind"})
	for _, h := range []string{"X-Hook-Sig", "X-Id", "X-Kind"} {
		require.True(t, gc.Keep(h), h)
	}
	require.False(t, gc.Keep("X-Signature"))
	require.False(t, gc.Keep("X-Event-Id"))

	var zero HeaderFilter
	require.False(t, zero.Keep("Content-Type"))
}

func TestCheckForwardHeaders(t *testing.T) {
	for _, n := range Names() {
		p, _ := Lookup(n)
		c := p.(OptionsChecker)
		for _, ok := range []string{"*", "X-Tenant", "X-Tenant, X-Acme-*", "x-a,x-b"} {
			require.NoError(t, c.CheckOptions(map[string]string{ForwardOption: ok}), "%s %q", n, ok)
		}
		for _, bad := range []string{"", " ", "X Tenant", "X-Tenant,,X-B", "X-*-B", "**", "X-A\x00", "X-A:1"} {
			err := c.CheckOptions(map[string]string{ForwardOption: bad})
			require.ErrorContains(t, err, ForwardOption, "%s %q", n, bad)
		}
	}
}
