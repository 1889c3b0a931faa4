package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPatchSource: PATCH changes enabled and events alone; the stored
// secrets, options, limit and retry schedule stay as they are (a default
// schedule stays the default, not a copy of it).
func TestPatchSource(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h") // github source, default schedule
	before, err := b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Nil(t, before.RetryDelays)

	a := b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"enabled": false})
	require.Equal(t, 200, a.status, string(a.body))
	var got sourceJSON
	a.json(t, &got)
	require.False(t, got.Enabled)
	a = b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"events": []string{"push", "pull_request.opened"}})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &got)
	require.False(t, got.Enabled, "enabled kept")
	require.Equal(t, []string{"push", "pull_request.opened"}, got.Events)

	after, err := b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Nil(t, after.RetryDelays, "the default schedule stays the default")
	require.Equal(t, before.Secrets, after.Secrets)
	require.Equal(t, before.MaxBodyBytes, after.MaxBodyBytes)
	require.Equal(t, before.MaxAttempts, after.MaxAttempts)

	for name, c := range map[string]struct {
		path   string
		body   any
		status int
	}{
		"empty":          {"/api/hosts/" + hostID + "/sources/github", map[string]any{}, 400},
		"bad event":      {"/api/hosts/" + hostID + "/sources/github", map[string]any{"events": []string{"pull request"}}, 400},
		"wrong type":     {"/api/hosts/" + hostID + "/sources/github", map[string]any{"enabled": "yes"}, 400},
		"unknown source": {"/api/hosts/" + hostID + "/sources/stripe", map[string]any{"enabled": true}, 404},
		"unknown host":   {"/api/hosts/h_nope/sources/github", map[string]any{"enabled": true}, 404},
	} {
		a := b.admin("PATCH", c.path, c.body)
		require.Equal(t, c.status, a.status, "%s: %s", name, a.body)
		a.errCode(t)
	}
	require.Equal(t, 401, b.do("PATCH", "/api/hosts/"+hostID+"/sources/github", jsonBody(map[string]any{"enabled": true}), nil).status)
}
