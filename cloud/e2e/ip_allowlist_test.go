package e2e

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// sendFrom posts a signed GitHub webhook to hostID's source with
// X-Forwarded-For set to xff (none when ""), and returns the status.
func sendFrom(t *testing.T, c *cloud, hostID, source, secret, delivery, xff string) int {
	t.Helper()
	w := signGitHub(secret, "push", delivery, []byte(`{"ref":"refs/heads/main","after":"`+delivery+`"}`))
	req, err := http.NewRequest("POST", c.url+"/api/webhooks/"+hostID+"/"+source, bytes.NewReader(w.body))
	require.NoError(t, err)
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

type rejectionView struct {
	Source   string `json:"source"`
	Status   int    `json:"status"`
	ClientIP string `json:"client_ip"`
	Reason   string `json:"reason"`
}

func rejectionsOf(t *testing.T, c *cloud, hostID string) []rejectionView {
	t.Helper()
	var out struct {
		Rejections []rejectionView `json:"rejections"`
	}
	require.Equal(t, 200, c.admin("GET", "/api/hosts/"+hostID+"/rejections", nil, &out))
	return out.Rejections
}

// TestIPAllowlist: sources' allowed_ips with the real binaries, set with
// cloud ctl. Behind a trusted proxy (RELAY_TRUSTED_PROXIES=127.0.0.1) the
// address X-Forwarded-For names is checked; without one the header is
// ignored and the peer (127.0.0.1) is. A named set refreshed from a file
// takes effect at once; the scheduled refresh reads sets from their
// publishers (fakes on loopback) and keeps the last good one when a
// publisher fails.
func TestIPAllowlist(t *testing.T) {
	t.Parallel()
	const secret = "gh-allowlist-secret"
	dbURL := engines(t)["sqlite"](t)

	github := "{\"hooks\": [\"203.0.113.0/24\"]}"
	publisher := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stripe":
			http.Error(w, "publisher down", http.StatusBadGateway)
			return
		case "/telegram":
			_, _ = w.Write([]byte("149.154.160.0/20\n91.108.4.0/22\n"))
			return
		}
		_, _ = w.Write([]byte(github))
	}))
	defer publisher.Close()

	c := startCloud(t, dbURL, "RELAY_TRUSTED_PROXIES=127.0.0.1", "RELAY_IPSET_REFRESH=24h",
		"RELAY_IPSET_URLS=github="+publisher.URL+"/meta,stripe="+publisher.URL+"/stripe,telegram="+publisher.URL+"/telegram")
	hostID, _ := c.newHost("allowlist", secret)
	secretFile := t.TempDir() + "/secrets"
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))

	// Through the trusted proxy: X-Forwarded-For's address is believed.
	ctlOK(t, c.url, "sources", "put", hostID, "github", "--secrets-file", secretFile, "--allowed-ips", "203.0.113.0/24")
	ctlOK(t, c.url, "sources", "put", hostID, "strict", "--provider", "github", "--secrets-file", secretFile, "--allowed-ips", "198.51.100.0/24")
	var src shared.Source
	ctlJSON(t, c.url, &src, "sources", "show", hostID, "strict")
	require.Equal(t, []string{"198.51.100.0/24"}, src.AllowedIPs)

	require.Equal(t, 200, sendFrom(t, c, hostID, "github", secret, "allow-1", "203.0.113.7"))
	require.Equal(t, 403, sendFrom(t, c, hostID, "strict", secret, "allow-2", "203.0.113.7"))
	rej := rejectionsOf(t, c, hostID)
	require.Len(t, rej, 1)
	require.Equal(t, "strict", rej[0].Source)
	require.Equal(t, 403, rej[0].Status)
	require.Equal(t, "203.0.113.7", rej[0].ClientIP)
	require.Len(t, c.deliveries(hostID, ""), 1, "the refused webhook is not stored")
	require.Contains(t, c.metrics(), `relay_intake_requests_total{outcome="ip_not_allowed",provider="github"} 1`)

	// A bad entry is refused, named.
	r := ctl(t, c.url, "", nil, "sources", "allow", hostID, "strict", "198.51.100.0/24", "hooks.example")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "hooks.example")

	// The scheduled refresh ran at start: github from its fake publisher;
	// stripe's publisher fails, so its shipped set stays, the error shown.
	var sets struct {
		Sets []shared.IPSet `json:"ip_sets"`
	}
	eventually(t, 30*time.Second, "the first scheduled refresh", func() bool {
		ctlJSON(t, c.url, &sets, "ipsets", "list")
		return len(sets.Sets) == 3 && sets.Sets[0].Size > 0 && sets.Sets[1].LastError != "" && sets.Sets[2].Origin != "shipped"
	})
	require.Equal(t, "github", sets.Sets[0].Name)
	require.Equal(t, []string{"203.0.113.0/24"}, sets.Sets[0].Prefixes)
	require.Equal(t, publisher.URL+"/meta", sets.Sets[0].Origin)
	require.Equal(t, "stripe", sets.Sets[1].Name)
	require.Equal(t, "shipped", sets.Sets[1].Origin, "the last good set stays")
	require.Equal(t, 15, sets.Sets[1].Size)
	require.Contains(t, sets.Sets[1].LastError, "502")
	require.Equal(t, "telegram", sets.Sets[2].Name)
	require.Equal(t, publisher.URL+"/telegram", sets.Sets[2].Origin)
	table := ctlOK(t, c.url, "ipsets", "list")
	require.Contains(t, table, "LAST ERROR")
	require.Contains(t, table, "502")

	// A source naming the set; a refresh from a file takes effect at once.
	ctlOK(t, c.url, "sources", "allow", hostID, "strict", "github")
	require.Equal(t, 200, sendFrom(t, c, hostID, "strict", secret, "allow-3", "203.0.113.7"))
	out := ctl(t, c.url, "# moved\n198.51.100.0/24\n", nil, "ipsets", "refresh", "github", "--file", "-")
	require.Equal(t, 0, out.code, out.stderr)
	require.Contains(t, out.stdout, "198.51.100.0/24")
	require.Equal(t, 403, sendFrom(t, c, hostID, "strict", secret, "allow-4", "203.0.113.7"))
	require.Equal(t, 200, sendFrom(t, c, hostID, "strict", secret, "allow-5", "198.51.100.20"))
	bad := ctl(t, c.url, "", nil, "ipsets", "refresh", "github", "--file", "-")
	require.NotEqual(t, 0, bad.code, "an empty list is refused")
	require.Equal(t, 200, sendFrom(t, c, hostID, "strict", secret, "allow-6", "198.51.100.21"), "and the last good set stays")
	ctlOK(t, c.url, "sources", "allow", hostID, "strict")
	require.Equal(t, 200, sendFrom(t, c, hostID, "strict", secret, "allow-7", "192.0.2.1"), "no entry: any address")

	// Without a trusted proxy, X-Forwarded-For is ignored: the peer,
	// 127.0.0.1, is what is checked.
	plain := startCloud(t, engines(t)["sqlite"](t))
	plainHost, _ := plain.newHost("plain", secret)
	require.Equal(t, 200, plain.admin("PATCH", "/api/hosts/"+plainHost+"/sources/github", map[string]any{"allowed_ips": []string{"203.0.113.0/24"}}, nil))
	require.Equal(t, 403, sendFrom(t, plain, plainHost, "github", secret, "plain-1", "203.0.113.7"))
	rej = rejectionsOf(t, plain, plainHost)
	require.Len(t, rej, 1)
	require.Equal(t, "127.0.0.1", rej[0].ClientIP)
	require.Equal(t, 200, plain.admin("PATCH", "/api/hosts/"+plainHost+"/sources/github", map[string]any{"allowed_ips": []string{"127.0.0.1"}}, nil))
	require.Equal(t, 200, sendFrom(t, plain, plainHost, "github", secret, "plain-2", "203.0.113.7"))
	require.Len(t, plain.deliveries(plainHost, ""), 1)
	require.Contains(t, plain.metrics(), `relay_intake_requests_total{outcome="ip_not_allowed",provider="github"} 1`)
}
