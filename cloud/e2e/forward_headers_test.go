package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestForwardedHeadersAreTheProviders: a signed GitHub webhook resent with
// headers of the sender's choosing reaches the local app without them, its
// GitHub and signature headers exactly as sent and still verifying; a
// source with forward_headers "*" keeps every header.
func TestForwardedHeadersAreTheProviders(t *testing.T) {
	c := startCloud(t, "sqlite:"+filepath.Join(t.TempDir(), "cloud.db"))
	const secret = "gh-forward-secret"
	hostID, code := c.newHost("forward-headers", secret)
	require.Equal(t, 201, c.admin("PUT", "/api/hosts/"+hostID+"/sources/gh-all", map[string]any{"provider": "github",
		"secrets": []string{secret}, "options": map[string]string{"forward_headers": "*"}}, nil))
	rc := startReceiver(t)
	claimAndStartHost(t, c.url, code, rc.url, "gh-all")

	body := fixture(t, "github/push.json")
	github := hdr("Content-Type", "application/json", "User-Agent", "GitHub-Hookshot/a1b2c3d",
		"X-GitHub-Event", "push", "X-GitHub-Delivery", "0b989ba4-242f-11e5-81e1-c7b6a3a0ac4e",
		"X-GitHub-Hook-ID", "292430182", "X-GitHub-Hook-Installation-Target-Type", "repository",
		"X-GitHub-Hook-Installation-Target-ID", "79929171",
		"X-Hub-Signature-256", "sha256="+hexMAC(sha256.New, secret, string(body)))
	injected := hdr("X-Injected", "1", "X-Forwarded-User", "admin", "Authorization", "Bearer forged", "Cookie", "session=forged")
	for _, source := range []string{"github", "gh-all"} {
		req, err := http.NewRequest("POST", c.url+"/api/webhooks/"+hostID+"/"+source, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = github.Clone()
		for k, v := range injected {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "%s: %s", source, answer)
	}

	eventually(t, 30*time.Second, "2 deliveries at the local app", func() bool { return rc.count() >= 2 })
	bySource := map[string]received{}
	for _, rs := range rc.snapshot() {
		require.Len(t, rs, 1)
		bySource[rs[0].Header.Get("X-Relay-Source")] = rs[0]
	}
	for _, source := range []string{"github", "gh-all"} {
		got, ok := bySource[source]
		require.True(t, ok, "%s delivered", source)
		require.Equal(t, body, got.Body, "%s: byte-exact", source)
		for name := range github {
			require.Equal(t, github.Get(name), got.Header.Get(name), "%s: %s as GitHub sent it", source, name)
		}
		require.True(t, hmac.Equal([]byte(got.Header.Get("X-Hub-Signature-256")), []byte("sha256="+hexMAC(sha256.New, secret, string(got.Body)))),
			"%s: the local app's signature check passes", source)
	}
	for name := range injected {
		require.Empty(t, bySource["github"].Header.Values(name), "github: %s is not the provider's: dropped", name)
		require.Equal(t, injected.Get(name), bySource["gh-all"].Header.Get(name), "gh-all: forward_headers * keeps %s", name)
	}
}
