package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// request is what the fake cloud was sent.
type request struct {
	Method, Path string
	Body         map[string]any
}

// fakeCloud answers every request with status and answer, and records
// what it was sent.
func fakeCloud(t *testing.T, status int, answer any) (url string, sent *[]request) {
	t.Helper()
	var reqs []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "Bearer admin-s3cret", r.Header.Get("Authorization"))
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		req := request{Method: r.Method, Path: r.URL.EscapedPath()}
		if len(b) > 0 {
			require.NoError(t, json.Unmarshal(b, &req.Body))
		}
		reqs = append(reqs, req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		require.NoError(t, json.NewEncoder(w).Encode(answer))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &reqs
}

// ctlAt runs `cloud ctl ARGS` against the cloud at url with the admin
// token, stdin as standard input.
func ctlAt(url, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	getenv := func(k string) string {
		switch k {
		case EnvToken:
			return "admin-s3cret"
		case EnvURL:
			return url
		}
		return ""
	}
	code = Run(context.Background(), args, strings.NewReader(stdin), &out, &errs, getenv)
	return code, out.String(), errs.String()
}

var testGroup = shared.Group{
	ID: "g_1", Name: "payments", Status: "active", RateLimitPerMin: 60, CreatedAt: now,
	WebhookURL: "https://relay.example.com/api/webhooks/g_1/{source}",
	Members: []shared.GroupMember{
		{HostID: "h_1", Name: "alpha", Status: "active", Claimed: true, Presence: "online", LastHeartbeatAt: at(-41 * time.Second), Position: 1, AddedAt: now},
		{HostID: "h_2", Name: "beta", Status: "active", Position: 2, AddedAt: now},
	},
}

// TestGroupsCommands: each groups command sends the request the admin
// API takes and prints its answer; --json prints the answer as it came.
func TestGroupsCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want request
		out  []string // in what is printed
	}{
		{[]string{"groups", "create", "payments", "--per-min", "60"},
			request{"POST", "/api/groups", map[string]any{"name": "payments", "rate_limit_per_min": float64(60)}},
			[]string{"g_1", "payments", "60/min, burst the cloud's default", "https://relay.example.com/api/webhooks/g_1/{source}"}},
		{[]string{"groups", "rename", "g_1", "billing"}, request{"PATCH", "/api/groups/g_1", map[string]any{"name": "billing"}}, nil},
		{[]string{"groups", "limits", "g_1", "--burst", "0"}, request{"PATCH", "/api/groups/g_1", map[string]any{"rate_limit_burst": float64(0)}}, nil},
		{[]string{"groups", "deactivate", "g_1"}, request{"POST", "/api/groups/g_1/deactivate", nil}, nil},
		{[]string{"groups", "add", "g_1", "h_2"}, request{"PUT", "/api/groups/g_1/members/h_2", map[string]any{}}, nil},
		{[]string{"groups", "add", "g_1", "h_2", "--position", "2"},
			request{"PUT", "/api/groups/g_1/members/h_2", map[string]any{"position": float64(2)}},
			[]string{"POSITION", "h_1", "alpha", "online", " ago\n", "h_2", "beta", "unclaimed"}},
	} {
		url, sent := fakeCloud(t, 200, testGroup)
		code, out, errs := ctlAt(url, "", tc.args...)
		require.Equal(t, ExitOK, code, "%q: %s", tc.args, errs)
		require.Equal(t, []request{tc.want}, *sent, tc.args)
		for _, s := range tc.out {
			require.Contains(t, out, s, tc.args)
		}
		// --json: the API's answer, nothing more.
		code, out, errs = ctlAt(url, "", append(tc.args, "--json")...)
		require.Equal(t, ExitOK, code, "%q: %s", tc.args, errs)
		var g shared.Group
		require.NoError(t, json.Unmarshal([]byte(out), &g), out)
		require.Equal(t, "g_1", g.ID)
	}
}

func TestGroupsListShowRemove(t *testing.T) {
	url, sent := fakeCloud(t, 200, map[string]any{"groups": []shared.Group{testGroup}})
	code, out, errs := ctlAt(url, "", "groups", "list")
	require.Equal(t, ExitOK, code, errs)
	require.Regexp(t, `g_1 +payments +active +2 +https://relay.example.com/api/webhooks/g_1/\{source\}`, out)
	require.Equal(t, "/api/groups", (*sent)[0].Path)

	src := shared.Source{Name: "stripe", Provider: "stripe", Mode: "any", Enabled: true, SecretFingerprints: []string{"fp"},
		WebhookURL: "https://relay.example.com/api/webhooks/g_1/stripe"}
	url, sent = fakeCloud(t, 200, shared.GroupDetail{Group: testGroup, Sources: []shared.Source{src}})
	code, out, errs = ctlAt(url, "", "groups", "show", "g_1")
	require.Equal(t, ExitOK, code, errs)
	require.Equal(t, []request{{Method: "GET", Path: "/api/groups/g_1"}}, *sent)
	require.Regexp(t, `1 +h_1 +alpha +active +online`, out)
	require.Regexp(t, `stripe +stripe +any +true +\* +1 +https://relay.example.com/api/webhooks/g_1/stripe`, out)

	url, sent = fakeCloud(t, 200, map[string]any{"sources": []shared.Source{src}})
	code, out, errs = ctlAt(url, "", "groups", "sources", "g_1")
	require.Equal(t, ExitOK, code, errs)
	require.Equal(t, "/api/groups/g_1/sources", (*sent)[0].Path)
	require.Regexp(t, `NAME +PROVIDER +MODE`, out)
	require.Regexp(t, `stripe +stripe +any`, out)

	url, sent = fakeCloud(t, 200, shared.GroupMemberRemoved{Group: testGroup, Cancelled: 3})
	code, out, errs = ctlAt(url, "", "groups", "remove", "g_1", "h_3")
	require.Equal(t, ExitOK, code, errs)
	require.Equal(t, []request{{Method: "DELETE", Path: "/api/groups/g_1/members/h_3"}}, *sent)
	require.Contains(t, out, "h_3 left the group; 3 of the group's fanout deliveries it held were cancelled")
	code, out, _ = ctlAt(url, "", "groups", "remove", "g_1", "h_3", "--json")
	require.Equal(t, ExitOK, code)
	require.JSONEq(t, `{"cancelled": 3}`, jsonField(t, out, "cancelled"))
}

// jsonField is the JSON object of out's one member name.
func jsonField(t *testing.T, out, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	return `{"` + name + `": ` + string(m[name]) + `}`
}

// TestGroupsSourceSet: a group's source is set as a host's is (sources
// put), secrets from a file or standard input, with a required mode.
func TestGroupsSourceSet(t *testing.T) {
	src := shared.Source{Name: "stripe", Provider: "stripe", Mode: "fanout", Enabled: true, SecretFingerprints: []string{"fp"}}
	url, sent := fakeCloud(t, 200, src)
	code, out, errs := ctlAt(url, "whsec_1\n\nwhsec_2\n", "groups", "source-set", "g_1", "stripe", "--mode", "fanout",
		"--provider", "stripe", "--events", "invoice.paid,customer.created", "--secrets-file", "-", "--retry-schedule", "0,10",
		"--option", "tolerance_s=300", "--allowed-ips", "stripe")
	require.Equal(t, ExitOK, code, errs)
	require.Equal(t, []request{{Method: "PUT", Path: "/api/groups/g_1/sources/stripe", Body: map[string]any{
		"mode": "fanout", "provider": "stripe", "enabled": true, "max_attempts": float64(0), "max_body_bytes": float64(0),
		"events": []any{"invoice.paid", "customer.created"}, "secrets": []any{"whsec_1", "whsec_2"},
		"retry_schedule_s": []any{float64(0), float64(10)}, "options": map[string]any{"tolerance_s": "300"},
		"allowed_ips": []any{"stripe"},
	}}}, *sent)
	require.Regexp(t, `mode +fanout`, out)

	// The same source put on a host has no mode.
	*sent = nil
	code, out, errs = ctlAt(url, "", "sources", "put", "h_1", "stripe", "--disabled")
	require.Equal(t, ExitOK, code, errs)
	require.Equal(t, []request{{Method: "PUT", Path: "/api/hosts/h_1/sources/stripe", Body: map[string]any{
		"enabled": false, "max_attempts": float64(0), "max_body_bytes": float64(0)}}}, *sent)
	require.NotNil(t, out)

	// Without a mode, or with another, nothing is sent.
	*sent = nil
	for _, args := range [][]string{
		{"groups", "source-set", "g_1", "stripe"},
		{"groups", "source-set", "g_1", "stripe", "--mode", "all"},
		{"groups", "source-set", "g_1", "--mode", "any"},
		{"groups", "add", "g_1"},
		{"groups", "create"},
	} {
		code, _, errs := ctlAt(url, "", args...)
		require.Equal(t, ExitUsage, code, "%q: %s", args, errs)
	}
	require.Empty(t, *sent)
}

// TestGroupsErrors: the cloud's refusals are the exit codes scripts rely
// on.
func TestGroupsErrors(t *testing.T) {
	for status, want := range map[int]int{404: ExitNotFound, 410: ExitNotFound, 400: ExitUsage, 401: ExitUnauthorized} {
		url, _ := fakeCloud(t, status, shared.ErrorResponse{Error: shared.ErrorDetail{Code: "x", Message: "no such group"}})
		code, _, errs := ctlAt(url, "", "groups", "add", "g_1", "h_1")
		require.Equal(t, want, code, "%d: %s", status, errs)
		require.Contains(t, errs, "no such group")
	}
}
