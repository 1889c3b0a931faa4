package server

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/openapi/openapitest"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
)

// onEngines runs test on a server over each engine: SQLite, and Postgres
// when RELAY_TEST_DATABASE_URL is set.
func onEngines(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, setupOn(t, sqlitetest.Open(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		test(t, setupOn(t, st))
	})
}

// groupAPI sends admin requests and checks every answer against the
// OpenAPI document.
type groupAPI struct {
	*bundle
	doc *openapitest.Doc
}

func newGroupAPI(t *testing.T, b *bundle) groupAPI {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	return groupAPI{b, doc}
}

// documented checks an answer to method path against the document.
func (g groupAPI) documented(method, path string, a answer) answer {
	g.t.Helper()
	op, ok := g.doc.Match(method, path)
	require.True(g.t, ok, "%s %s is documented", method, path)
	require.NoError(g.t, g.doc.ValidateResponse(op, a.status, a.header.Get("Content-Type"), a.body), "%s %s: %s", method, path, a.body)
	return a
}

// call sends an admin request that must answer status, and decodes its
// answer into out (when not nil), zeroed first: what the answer leaves
// out is not kept from before.
func (g groupAPI) call(method, path string, in any, status int, out any) answer {
	g.t.Helper()
	a := g.documented(method, path, g.admin(method, path, in))
	require.Equal(g.t, status, a.status, "%s %s: %s", method, path, a.body)
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero()
		a.json(g.t, out)
	}
	return a
}

// groupState is everything the store holds about groups and their
// sources, to show that a refused request changed nothing.
func (g groupAPI) groupState() string {
	g.t.Helper()
	ctx := context.Background()
	groups, err := g.store.GroupList(ctx)
	require.NoError(g.t, err)
	state := map[string]any{"groups": groups}
	for _, grp := range groups {
		srcs, err := g.store.SourceList(ctx, grp.ID)
		require.NoError(g.t, err)
		state[grp.ID] = srcs
	}
	out, err := json.Marshal(state)
	require.NoError(g.t, err)
	return string(out)
}

// refused sends a request that must fail with status and code, as the
// document says, and change nothing of the hosts' or the groups'.
func (g groupAPI) refused(method, path string, body any, status int, code string) answer {
	g.t.Helper()
	before := g.groupState()
	a := g.documented(method, path, g.bundle.refused(method, path, body, status, code))
	require.Equal(g.t, before, g.groupState(), "%s %s %v changed a group", method, path, body)
	return a
}

// newGroup creates a group named name.
func (g groupAPI) newGroup(name string) shared.Group {
	g.t.Helper()
	var out shared.Group
	g.call("POST", "/api/groups", map[string]any{"name": name}, 201, &out)
	return out
}

// hostView is a host as GET /api/hosts/:id answers it.
func (g groupAPI) hostView(id string) hostJSON {
	g.t.Helper()
	var h hostJSON
	g.call("GET", "/api/hosts/"+id, nil, 200, &h)
	return h
}

// TestGroupsManage: a group is created, listed, read, renamed and
// deactivated; hosts join it in order and leave it; every answer is as
// the OpenAPI document says, and every refused request changes nothing.
func TestGroupsManage(t *testing.T) {
	onEngines(t, func(t *testing.T, b *bundle) {
		g := newGroupAPI(t, b)
		hostA, tokenA := b.newHost("alpha")
		hostB, _ := b.newHost("beta")
		var unclaimed shared.CreateHostResponse
		g.call("POST", "/api/hosts", map[string]string{"name": "gamma"}, 201, &unclaimed)
		hostC := unclaimed.ID
		b.clock.Advance(time.Second)
		require.Equal(t, 200, b.heartbeat(tokenA, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0)}).status)

		// Create.
		var grp shared.Group
		g.call("POST", "/api/groups", map[string]any{"name": "  payments  ", "rate_limit_per_min": 60}, 201, &grp)
		require.True(t, auth.ValidGroupID(grp.ID), grp.ID)
		require.Equal(t, "payments", grp.Name, "trimmed")
		require.Equal(t, "active", grp.Status)
		require.Equal(t, []int{60, 0}, []int{grp.RateLimitPerMin, grp.RateLimitBurst})
		require.Equal(t, b.srv.URL+"/api/webhooks/"+grp.ID+"/{source}", grp.WebhookURL)
		require.Empty(t, grp.Members)
		require.Contains(t, string(g.call("GET", "/api/groups/"+grp.ID, nil, 200, nil).body), `"members":[]`, "an empty list, not null")
		for name, body := range map[string]any{
			"no name":         map[string]any{},
			"empty name":      map[string]any{"name": "   "},
			"long name":       map[string]any{"name": strings.Repeat("n", 201)},
			"negative rate":   map[string]any{"name": "x", "rate_limit_per_min": -1},
			"rate too large":  map[string]any{"name": "x", "rate_limit_burst": maxRateLimit + 1},
			"rate as string":  map[string]any{"name": "x", "rate_limit_burst": "10"},
			"malformed":       `{"name": "x"`,
			"empty body":      ``,
			"name not string": map[string]any{"name": 5},
		} {
			a := g.refused("POST", "/api/groups", body, 400, shared.CodeInvalid)
			require.NotEmpty(t, a.body, name)
		}

		// Members: in the order of their position, then of their joining.
		var got shared.Group
		g.call("PUT", "/api/groups/"+grp.ID+"/members/"+hostA, nil, 200, &got)
		require.Len(t, got.Members, 1)
		a := g.hostView(hostA)
		require.Equal(t, shared.GroupMember{HostID: hostA, Name: "alpha", Status: "active", Claimed: true,
			Presence: string(a.Presence), LastHeartbeatAt: a.LastHeartbeatAt, Position: 1, AddedAt: b.clock.Now().UTC()}, got.Members[0])
		require.Equal(t, "online", got.Members[0].Presence, "as the host list says it")
		b.clock.Advance(time.Second)
		g.call("PUT", "/api/groups/"+grp.ID+"/members/"+hostB, map[string]any{}, 200, &got)
		b.clock.Advance(time.Second)
		g.call("PUT", "/api/groups/"+grp.ID+"/members/"+hostC, map[string]any{"position": 1}, 200, &got)
		require.Equal(t, []string{hostA, hostC, hostB}, memberIDs(got))
		require.Equal(t, []int{1, 1, 2}, []int{got.Members[0].Position, got.Members[1].Position, got.Members[2].Position})
		c := got.Members[1]
		require.Equal(t, []any{"gamma", false, "", (*time.Time)(nil)}, []any{c.Name, c.Claimed, c.Presence, c.LastHeartbeatAt},
			"an unclaimed host has no presence")
		before := got
		g.call("PUT", "/api/groups/"+grp.ID+"/members/"+hostA, map[string]any{"position": 9}, 200, &got)
		require.Equal(t, before, got, "a member added again keeps its place")

		var deactivated shared.CreateHostResponse
		g.call("POST", "/api/hosts", map[string]string{"name": "delta"}, 201, &deactivated)
		g.call("POST", "/api/hosts/"+deactivated.ID+"/deactivate", nil, 200, nil)
		unknownHost, unknownGroup := "h_0000000000000000000000000z", "g_0000000000000000000000000z"
		members := "/api/groups/" + grp.ID + "/members/"
		g.refused("PUT", members+unknownHost, nil, 404, shared.CodeNotFound)
		g.refused("PUT", members+"nope", nil, 404, shared.CodeNotFound)
		g.refused("PUT", members+grp.ID, nil, 404, shared.CodeNotFound)
		g.refused("PUT", members+deactivated.ID, nil, 410, shared.CodeGone)
		g.refused("PUT", "/api/groups/"+unknownGroup+"/members/"+hostA, nil, 404, shared.CodeNotFound)
		g.refused("PUT", "/api/groups/nope/members/"+hostA, nil, 404, shared.CodeNotFound)
		g.refused("PUT", "/api/groups/"+hostA+"/members/"+hostB, nil, 404, shared.CodeNotFound)
		g.refused("PUT", members+hostB, map[string]any{"position": -1}, 400, shared.CodeInvalid)
		g.refused("PUT", members+hostB, map[string]any{"position": "1"}, 400, shared.CodeInvalid)
		g.refused("PUT", members+hostB, `{"position":`, 400, shared.CodeInvalid)

		// List and read.
		b.clock.Advance(time.Second)
		other := g.newGroup("other")
		var list struct {
			Groups []shared.Group `json:"groups"`
		}
		g.call("GET", "/api/groups", nil, 200, &list)
		require.Len(t, list.Groups, 2)
		require.Equal(t, got, list.Groups[0], "oldest first")
		require.Equal(t, other, list.Groups[1])
		var detail shared.GroupDetail
		g.call("GET", "/api/groups/"+grp.ID, nil, 200, &detail)
		require.Equal(t, got, detail.Group)
		require.Empty(t, detail.Sources)
		g.refused("GET", "/api/groups/"+unknownGroup, nil, 404, shared.CodeNotFound)
		g.refused("GET", "/api/groups/"+hostA, nil, 404, shared.CodeNotFound)
		g.refused("GET", "/api/groups/nope", nil, 404, shared.CodeNotFound)

		// PATCH: partial updates.
		g.call("PATCH", "/api/groups/"+grp.ID, map[string]any{"name": " billing "}, 200, &got)
		require.Equal(t, []any{"billing", 60, 0}, []any{got.Name, got.RateLimitPerMin, got.RateLimitBurst})
		require.Equal(t, []string{hostA, hostC, hostB}, memberIDs(got), "with its members")
		g.call("PATCH", "/api/groups/"+grp.ID, map[string]any{"rate_limit_per_min": 0, "rate_limit_burst": 40}, 200, &got)
		require.Equal(t, []any{"billing", 0, 40}, []any{got.Name, got.RateLimitPerMin, got.RateLimitBurst})
		for name, body := range map[string]any{
			"empty object":  map[string]any{},
			"unknown field": map[string]any{"name": "x", "status": "deactivated"},
			"empty name":    map[string]any{"name": " "},
			"null name":     `{"name": null}`,
			"negative rate": map[string]any{"rate_limit_per_min": -1},
			"null":          `null`,
		} {
			a := g.refused("PATCH", "/api/groups/"+grp.ID, body, 400, shared.CodeInvalid)
			require.NotEmpty(t, a.body, name)
		}
		g.refused("PATCH", "/api/groups/"+unknownGroup, map[string]any{"name": "x"}, 404, shared.CodeNotFound)

		// Remove: the answer says how many deliveries were cancelled.
		var removed shared.GroupMemberRemoved
		g.call("DELETE", members+hostC, nil, 200, &removed)
		require.Zero(t, removed.Cancelled)
		require.Equal(t, []string{hostA, hostB}, memberIDs(removed.Group))
		g.refused("DELETE", members+hostC, nil, 404, shared.CodeNotFound)
		g.refused("DELETE", members+unknownHost, nil, 404, shared.CodeNotFound)
		g.refused("DELETE", "/api/groups/"+unknownGroup+"/members/"+hostA, nil, 404, shared.CodeNotFound)
		g.refused("DELETE", "/api/groups/nope/members/"+hostA, nil, 404, shared.CodeNotFound)

		// Deactivate: the group stays, with its members, and takes no new one.
		g.call("POST", "/api/groups/"+grp.ID+"/deactivate", nil, 200, &got)
		require.Equal(t, "deactivated", got.Status)
		require.Equal(t, b.clock.Now().UTC(), got.DeactivatedAt.UTC())
		require.Equal(t, []string{hostA, hostB}, memberIDs(got))
		g.refused("PUT", members+hostC, nil, 410, shared.CodeGone)
		g.refused("POST", "/api/groups/"+unknownGroup+"/deactivate", nil, 404, shared.CodeNotFound)
		g.call("GET", "/api/groups/"+grp.ID, nil, 200, &detail)
		require.Equal(t, got, detail.Group)
		g.call("DELETE", members+hostB, nil, 200, &removed)
		require.Equal(t, []string{hostA}, memberIDs(removed.Group), "a deactivated group's member may leave")
	})
}

func memberIDs(g shared.Group) []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.HostID
	}
	return ids
}

// TestGroupSources: a group's sources are set as a host's are, with a
// required mode; a host's source refuses a mode; neither route reaches
// the other's sources. Every answer is as the OpenAPI document says.
func TestGroupSources(t *testing.T) {
	onEngines(t, func(t *testing.T, b *bundle) {
		g := newGroupAPI(t, b)
		hostA, _ := b.newHost("alpha")
		grp := g.newGroup("payments")
		srcPath := "/api/groups/" + grp.ID + "/sources/"

		var src shared.Source
		g.call("PUT", srcPath+"github", map[string]any{"secrets": []string{"gh-s3cret"}, "mode": "any", "events": []string{"push"},
			"retry_schedule_s": []float64{0, 30}, "allowed_ips": []string{"203.0.113.0/24"}}, 201, &src)
		require.Equal(t, "any", src.Mode)
		require.Equal(t, "github", src.Provider)
		require.Equal(t, []string{"push"}, src.Events)
		require.Equal(t, []float64{0, 30}, src.RetrySchedule)
		require.Equal(t, []string{"203.0.113.0/24"}, src.AllowedIPs)
		require.Len(t, src.SecretFingerprints, 1)
		require.Equal(t, b.srv.URL+"/api/webhooks/"+grp.ID+"/github", src.WebhookURL)

		// The secret is sealed for the group's source: intake opens it so.
		stored, err := b.store.SourceGet(context.Background(), grp.ID, "github")
		require.NoError(t, err)
		require.Equal(t, store.GroupAny, stored.Mode)
		pt, err := b.server.ring.Open(stored.Secrets[0].Ciphertext, intake.SealContext(grp.ID, "github"))
		require.NoError(t, err)
		require.Equal(t, "gh-s3cret", string(pt))

		// Replaced whole, the secrets kept when omitted; the mode changes.
		g.call("PUT", srcPath+"github", map[string]any{"mode": "fanout"}, 200, &src)
		require.Equal(t, "fanout", src.Mode)
		require.Empty(t, src.Events)
		require.Len(t, src.SecretFingerprints, 1, "kept")
		g.call("PUT", srcPath+"billing", map[string]any{"provider": "stripe", "secrets": []string{"whsec_s3cret"}, "mode": "any"}, 201, nil)

		for name, body := range map[string]any{
			"no mode":          map[string]any{"secrets": []string{"x"}},
			"empty mode":       map[string]any{"secrets": []string{"x"}, "mode": ""},
			"unknown mode":     map[string]any{"secrets": []string{"x"}, "mode": "all"},
			"no secret":        map[string]any{"mode": "any"},
			"unknown provider": map[string]any{"provider": "nope", "secrets": []string{"x"}, "mode": "any"},
			"bad schedule":     map[string]any{"secrets": []string{"x"}, "mode": "any", "retry_schedule_s": []float64{5}},
			"bad event":        map[string]any{"secrets": []string{"x"}, "mode": "any", "events": []string{"a b"}},
		} {
			a := g.refused("PUT", srcPath+"linear", body, 400, shared.CodeInvalid)
			require.NotEmpty(t, a.body, name)
		}
		g.refused("PUT", srcPath+"Bad_Name", map[string]any{"secrets": []string{"x"}, "mode": "any"}, 400, shared.CodeInvalid)
		g.refused("PUT", "/api/groups/g_0000000000000000000000000z/sources/github", map[string]any{"secrets": []string{"x"}, "mode": "any"},
			404, shared.CodeNotFound)
		g.refused("PUT", "/api/groups/"+hostA+"/sources/github", map[string]any{"secrets": []string{"x"}, "mode": "any"}, 404, shared.CodeNotFound)

		// A host's source has no mode, and the host routes reach no group.
		a := g.refused("PUT", "/api/hosts/"+hostA+"/sources/github", map[string]any{"secrets": []string{"x"}, "mode": "any"}, 400, shared.CodeInvalid)
		require.Contains(t, string(a.body), "mode")
		g.refused("PATCH", "/api/hosts/"+hostA+"/sources/github", map[string]any{"mode": "any"}, 400, shared.CodeInvalid)
		g.refused("PATCH", "/api/hosts/"+hostA+"/sources/github", map[string]any{"enabled": false, "mode": ""}, 400, shared.CodeInvalid)
		g.refused("PUT", "/api/hosts/"+grp.ID+"/sources/github", map[string]any{"secrets": []string{"x"}}, 404, shared.CodeNotFound)
		g.refused("PATCH", "/api/hosts/"+grp.ID+"/sources/github", map[string]any{"enabled": false}, 404, shared.CodeNotFound)
		g.refused("GET", "/api/hosts/"+grp.ID+"/sources/github", nil, 404, shared.CodeNotFound)
		g.refused("GET", "/api/hosts/"+grp.ID+"/sources", nil, 404, shared.CodeNotFound)
		var own shared.Source
		g.call("GET", "/api/hosts/"+hostA+"/sources/github", nil, 200, &own)
		require.Empty(t, own.Mode)
		require.NotContains(t, string(g.call("GET", "/api/hosts/"+hostA+"/sources/github", nil, 200, nil).body), "mode", "a host's source has none")

		// PATCH: the fields given, the mode among them.
		g.call("PATCH", srcPath+"github", map[string]any{"mode": "any"}, 200, &src)
		require.Equal(t, "any", src.Mode)
		g.call("PATCH", srcPath+"github", map[string]any{"enabled": false}, 200, &src)
		require.False(t, src.Enabled)
		require.Equal(t, "any", src.Mode, "kept")
		require.Len(t, src.SecretFingerprints, 1)
		g.refused("PATCH", srcPath+"github", map[string]any{"mode": "all"}, 400, shared.CodeInvalid)
		g.refused("PATCH", srcPath+"github", map[string]any{"mode": ""}, 400, shared.CodeInvalid)
		g.refused("PATCH", srcPath+"github", map[string]any{}, 400, shared.CodeInvalid)
		g.refused("PATCH", srcPath+"linear", map[string]any{"enabled": true}, 404, shared.CodeNotFound)

		// Read: one, the list, and the group's own answer.
		var list struct {
			Sources []shared.Source `json:"sources"`
		}
		g.call("GET", srcPath[:len(srcPath)-1], nil, 200, &list)
		require.Len(t, list.Sources, 2)
		require.Equal(t, "billing", list.Sources[0].Name)
		require.Equal(t, src, list.Sources[1])
		var one shared.Source
		g.call("GET", srcPath+"github", nil, 200, &one)
		require.Equal(t, src, one)
		g.refused("GET", srcPath+"linear", nil, 404, shared.CodeNotFound)
		g.refused("GET", "/api/groups/g_0000000000000000000000000z/sources", nil, 404, shared.CodeNotFound)
		var detail shared.GroupDetail
		body := g.call("GET", "/api/groups/"+grp.ID, nil, 200, &detail).body
		require.Equal(t, list.Sources, detail.Sources)
		require.NotContains(t, string(body), "s3cret")
	})
}

// TestGroupsRequireTheAdminToken: every group route refuses a request
// without the admin token, and changes nothing.
func TestGroupsRequireTheAdminToken(t *testing.T) {
	b := setup(t)
	g := newGroupAPI(t, b)
	hostID, _ := b.newHost("h")
	grp := g.newGroup("g")
	routes := [][2]string{
		{"POST", "/api/groups"}, {"GET", "/api/groups"}, {"GET", "/api/groups/" + grp.ID}, {"PATCH", "/api/groups/" + grp.ID},
		{"POST", "/api/groups/" + grp.ID + "/deactivate"}, {"PUT", "/api/groups/" + grp.ID + "/members/" + hostID},
		{"DELETE", "/api/groups/" + grp.ID + "/members/" + hostID}, {"GET", "/api/groups/" + grp.ID + "/sources"},
		{"GET", "/api/groups/" + grp.ID + "/sources/github"}, {"PUT", "/api/groups/" + grp.ID + "/sources/github"},
		{"PATCH", "/api/groups/" + grp.ID + "/sources/github"},
	}
	for _, r := range routes {
		b.clock.Advance(6 * time.Second) // within the failed logins a client may make
		before := g.groupState()
		a := g.documented(r[0], r[1], b.do(r[0], r[1], strings.NewReader(`{"name":"x"}`), nil))
		require.Equal(t, 401, a.status, "%s %s", r[0], r[1])
		require.Equal(t, shared.CodeUnauthorized, a.errCode(t))
		require.Equal(t, before, g.groupState(), "%s %s", r[0], r[1])
	}
}
