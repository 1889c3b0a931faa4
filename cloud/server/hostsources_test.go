package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/openapi/openapitest"
	"github.com/relaykit/relay/shared"
)

// TestHostSourcesOwnOnly: a host reads its own sources (and its groups')
// as the cloud has them — name, provider, enabled, event filter, ordered by name, no secret
// nor its fingerprint — never another host's; without a host token,
// nothing. Every answer is as the OpenAPI document describes it.
func TestHostSourcesOwnOnly(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	b := setup(t)
	hostA, tokenA := b.newHost("a")
	hostB, tokenB := b.newHost("b")
	a := b.admin("PUT", "/api/hosts/"+hostA+"/sources/stripe", map[string]any{"provider": "stripe", "secrets": []string{"whsec_s3cret"},
		"events": []string{"invoice.paid", "customer"}})
	require.Equal(t, 201, a.status, string(a.body))
	a = b.admin("PUT", "/api/hosts/"+hostA+"/sources/linear", map[string]any{"provider": "linear", "secrets": []string{"lin_s3cret"}, "enabled": false})
	require.Equal(t, 201, a.status, string(a.body))
	a = b.admin("PUT", "/api/hosts/"+hostB+"/sources/only-b", map[string]any{"provider": "github", "secrets": []string{testSecret}})
	require.Equal(t, 201, a.status, string(a.body))

	get := func(token string) answer {
		t.Helper()
		headers := map[string]string{}
		if token != "" {
			headers["Authorization"] = "Bearer " + token
		}
		a := b.do("GET", shared.PathHostSources, nil, headers)
		op, ok := doc.Match("GET", shared.PathHostSources)
		require.True(t, ok)
		require.NoError(t, doc.ValidateResponse(op, a.status, a.header.Get("Content-Type"), a.body), "documented: %s", a.body)
		return a
	}

	a = get(tokenA)
	require.Equal(t, 200, a.status, string(a.body))
	require.NotContains(t, string(a.body), "s3cret")
	require.NotContains(t, string(a.body), "fingerprint")
	var got shared.HostSourcesResponse
	a.json(t, &got)
	yes, no := true, false // whether each provider's events carry actions
	require.Equal(t, []shared.HostSource{
		{Name: "github", Provider: "github", Enabled: true, Events: []string{}, Actions: &yes},
		{Name: "linear", Provider: "linear", Enabled: false, Events: []string{}, Actions: &yes},
		{Name: "stripe", Provider: "stripe", Enabled: true, Events: []string{"invoice.paid", "customer"}, Actions: &no},
	}, got.Sources)

	get(tokenB).json(t, &got)
	require.Equal(t, []shared.HostSource{
		{Name: "github", Provider: "github", Enabled: true, Events: []string{}, Actions: &yes},
		{Name: "only-b", Provider: "github", Enabled: true, Events: []string{}, Actions: &yes},
	}, got.Sources, "its own, not host a's")

	// A member reads its groups' sources too, by name, after its own;
	// a name it has itself stays its own.
	var grp shared.Group
	a = b.admin("POST", "/api/groups", map[string]any{"name": "team"})
	require.Equal(t, 201, a.status, string(a.body))
	a.json(t, &grp)
	require.Equal(t, 200, b.admin("PUT", "/api/groups/"+grp.ID+"/members/"+hostB, nil).status)
	for _, name := range []string{"deploys", "github"} {
		a = b.admin("PUT", "/api/groups/"+grp.ID+"/sources/"+name, map[string]any{"provider": "github", "mode": "any",
			"secrets": []string{testSecret}})
		require.Equal(t, 201, a.status, string(a.body))
	}
	get(tokenB).json(t, &got)
	require.Equal(t, []shared.HostSource{
		{Name: "github", Provider: "github", Enabled: true, Events: []string{}, Actions: &yes},
		{Name: "only-b", Provider: "github", Enabled: true, Events: []string{}, Actions: &yes},
		{Name: "deploys", Provider: "github", Enabled: true, Events: []string{}, Group: grp.ID, Actions: &yes},
	}, got.Sources, "its own, then its group's")
	get(tokenA).json(t, &got)
	require.Len(t, got.Sources, 3, "not a member: not the group's")

	require.Equal(t, 401, get("").status)
	require.Equal(t, 401, get(testAdmin).status, "the admin token is no host token")
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+hostA+"/deactivate", nil).status)
	require.Equal(t, 401, get(tokenA).status, "a deactivated host's token is revoked")
}
