package server

import (
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/openapi"
	"github.com/relaykit/relay/cloud/openapi/openapitest"
)

// TestOpenAPIRoutes: every route the server has is described in
// openapi.json, and every operation the document describes is a route. A
// route added without its description (or a description left behind by a
// route taken away) fails here, naming it.
func TestOpenAPIRoutes(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	b := setup(t)
	eng, ok := b.handler.(*gin.Engine)
	require.True(t, ok, "Handler is gin's engine")

	routes := map[string]bool{}
	for _, r := range eng.Routes() {
		routes[openapitest.Operation{Method: r.Method, Path: openapitest.FromGin(r.Path)}.String()] = true
	}
	documented := map[string]bool{}
	for _, op := range doc.Operations() {
		documented[op.String()] = true
	}
	var undocumented, unrouted []string
	for r := range routes {
		if !documented[r] {
			undocumented = append(undocumented, r)
		}
	}
	for d := range documented {
		if !routes[d] {
			unrouted = append(unrouted, d)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unrouted)
	require.Empty(t, undocumented, "routes without a description in cloud/openapi/openapi.json:\n%s", strings.Join(undocumented, "\n"))
	require.Empty(t, unrouted, "operations in cloud/openapi/openapi.json without a route:\n%s", strings.Join(unrouted, "\n"))
	require.NotEmpty(t, routes)
}

// TestOpenAPIServed: GET /api/openapi.json, without credentials, is the
// embedded document, and valid by its own description.
func TestOpenAPIServed(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	b := setup(t)
	a := b.do("GET", openapi.Path, nil, nil)
	require.Equal(t, 200, a.status)
	require.Equal(t, openapi.Document, a.body)
	op, ok := doc.Match("GET", openapi.Path)
	require.True(t, ok)
	require.NoError(t, doc.ValidateResponse(op, a.status, a.header.Get("Content-Type"), a.body))
}

// TestOpenAPIMatch: a request finds its operation as the router does.
func TestOpenAPIMatch(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	for req, want := range map[string]string{
		"POST /api/hosts/claim":                      "/api/hosts/claim",
		"GET /api/hosts/h_1":                         "/api/hosts/{id}",
		"DELETE /api/hosts/h_1/webhooks/dlq":         "/api/hosts/{id}/webhooks/dlq",
		"GET /api/hosts/h_1/webhooks/github:a%2Fb:1": "/api/hosts/{id}/webhooks/{deliveryId}",
		"POST /api/webhooks/h_1/github":              "/api/webhooks/{hostId}/{source}",
	} {
		m, p, _ := strings.Cut(req, " ")
		op, ok := doc.Match(m, p)
		require.True(t, ok, req)
		require.Equal(t, want, op.Path, req)
	}
	_, ok := doc.Match("POST", "/api/hosts/h_1")
	require.False(t, ok)
}

// TestHostRateLimitApplied: a host's answer carries the limit intake
// applies, the cloud's default standing in for each of the host's own
// settings that is 0, and that answer is what the document says.
func TestHostRateLimitApplied(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	b := setup(t)
	id, _ := b.newHost("limited")
	get := func() hostJSON {
		t.Helper()
		a := b.admin("GET", "/api/hosts/"+id, nil)
		require.Equal(t, 200, a.status, string(a.body))
		op, ok := doc.Match("GET", "/api/hosts/"+id)
		require.True(t, ok)
		require.NoError(t, doc.ValidateResponse(op, a.status, a.header.Get("Content-Type"), a.body))
		var h hostJSON
		a.json(t, &h)
		return h
	}
	perMin, burst := b.server.cfg.RateLimitPerMin, b.server.cfg.RateLimitBurst
	require.Positive(t, perMin)
	h := get()
	require.Equal(t, 0, h.RateLimitPerMin)
	require.Equal(t, rateLimitJSON{PerMin: perMin, Burst: burst}, h.RateLimit)

	require.Equal(t, 200, b.admin("PATCH", "/api/hosts/"+id, map[string]int{"rate_limit_per_min": 7}).status)
	require.Equal(t, rateLimitJSON{PerMin: 7, Burst: burst}, get().RateLimit)
	require.Equal(t, 200, b.admin("PATCH", "/api/hosts/"+id, map[string]int{"rate_limit_burst": 3}).status)
	require.Equal(t, rateLimitJSON{PerMin: 7, Burst: 3}, get().RateLimit)
}
