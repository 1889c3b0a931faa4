package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// forgedHeaders are what a sender holding one signed request might add,
// hoping the local app trusts them.
var forgedHeaders = map[string]string{
	"X-Forwarded-User": "admin",
	"Authorization":    "Bearer forged-token",
	"Cookie":           "session=forged-cookie",
	"X-Injected":       "1",
	"X-Relay-Source":   "forged-source",
	"X-Tenant":         "t-7",
}

// TestIntakeKeepsTheProviderHeaders: a source stores, and so forwards and
// shows, the headers its provider sends and those its forward_headers
// names; "*" keeps every one as before. Values are kept as sent.
func TestIntakeKeepsTheProviderHeaders(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "gh-tenant", map[string]any{"provider": "github", "secrets": []string{testSecret},
		"options": map[string]string{"forward_headers": "x-tenant"}})
	b.addSource(hostID, "gh-all", map[string]any{"provider": "github", "secrets": []string{testSecret},
		"options": map[string]string{"forward_headers": "*"}})
	b.addSource(hostID, "internal", map[string]any{"provider": "generic", "secrets": []string{testSecret}})

	send := func(source, delivery string) map[string]string {
		t.Helper()
		h := ghHeaders(testSecret, delivery, prBody)
		h["User-Agent"] = "GitHub-Hookshot/044aadd"
		h["X-GitHub-Hook-ID"] = "292430182"
		h["X-GitHub-Hook-Installation-Target-Type"] = "repository"
		h["X-GitHub-Hook-Installation-Target-ID"] = "79929171"
		h["X-Signature"] = ghHeaders(testSecret, delivery, prBody)["X-Hub-Signature-256"]
		sent := map[string]string{}
		for k, v := range h {
			sent[k] = v
		}
		for k, v := range forgedHeaders {
			h[k] = v
		}
		a := b.do("POST", "/api/webhooks/"+hostID+"/"+source, bytes.NewReader(prBody), h)
		require.Less(t, a.status, 300, "%s: %s", source, a.body)
		return sent
	}
	delivery := func(source string) *store.Delivery {
		t.Helper()
		ds, err := b.store.DeliveryList(context.Background(), &store.DeliveryListParams{HostID: hostID, Limit: 10})
		require.NoError(t, err)
		for _, d := range ds {
			if d.Source == source {
				return d
			}
		}
		t.Fatalf("no delivery of %s", source)
		return nil
	}
	stored := func(source string) map[string]string { return delivery(source).Headers }
	lower := strings.ToLower

	sent := send("github", "d-default")
	got := stored("github")
	for k, v := range sent {
		if k == "X-Signature" {
			continue // not GitHub's
		}
		require.Equal(t, v, got[lower(k)], "github: %s kept as sent", k)
	}
	for k := range forgedHeaders {
		require.NotContains(t, got, lower(k), "github: a forged %s is dropped", k)
	}
	require.NotContains(t, got, "x-signature")
	view := b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+delivery("github").ID, nil)
	require.Equal(t, 200, view.status)
	for _, forged := range []string{"forged-token", "forged-cookie", "forged-source"} {
		require.NotContains(t, string(view.body), forged, "the API shows what is stored")
	}

	send("gh-tenant", "d-tenant")
	got = stored("gh-tenant")
	require.Equal(t, "t-7", got["x-tenant"], "forward_headers adds")
	require.Equal(t, "pull_request", got["x-github-event"])
	require.NotContains(t, got, "authorization")
	require.NotContains(t, got, "x-injected")

	send("gh-all", "d-all")
	got = stored("gh-all")
	for k, v := range forgedHeaders {
		require.Equal(t, v, got[lower(k)], "*: %s kept", k)
	}

	// Generic keeps every header unless its source names a list.
	send("internal", "d-generic")
	got = stored("internal")
	require.Equal(t, "1", got["x-injected"])
	require.Equal(t, "Bearer forged-token", got["authorization"])
}

// TestForwardHeadersOptionChecked: a bad forward_headers is refused when
// the source is configured, for any provider.
func TestForwardHeadersOptionChecked(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	for _, p := range []string{"github", "stripe", "generic"} {
		a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/s-"+p, map[string]any{"provider": p, "secrets": []string{"whsec_x"},
			"options": map[string]string{"forward_headers": "X Tenant"}})
		require.Equal(t, 400, a.status, "%s: %s", p, a.body)
		require.Contains(t, string(a.body), "forward_headers")
	}
}
