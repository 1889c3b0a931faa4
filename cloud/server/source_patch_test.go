package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
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
	var got shared.Source
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

// TestChangeSourceSecret: a new secret replaces the stored ones, or goes
// first beside them during a changeover, within the bound on secrets; a
// refused change leaves the source as it was.
func TestChangeSourceSecret(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	hostID, _ := b.newHost("h")
	src, err := b.store.SourceGet(ctx, hostID, "github")
	require.NoError(t, err)
	first := src.Secrets[0].Fingerprint

	src, err = b.server.ChangeSource(ctx, hostID, "github", &SourceChange{NewSecret: "second", KeepSecrets: true})
	require.NoError(t, err)
	require.Len(t, src.Secrets, 2)
	require.Equal(t, first, src.Secrets[1].Fingerprint)
	require.NotEqual(t, first, src.Secrets[0].Fingerprint)

	for i := range maxSecrets - 2 {
		_, err = b.server.ChangeSource(ctx, hostID, "github", &SourceChange{NewSecret: "more-" + itoa(int64(i)), KeepSecrets: true})
		require.NoError(t, err)
	}
	before, err := b.store.SourceGet(ctx, hostID, "github")
	require.NoError(t, err)
	require.Len(t, before.Secrets, maxSecrets)
	_, err = b.server.ChangeSource(ctx, hostID, "github", &SourceChange{NewSecret: "one-too-many", KeepSecrets: true})
	code, msg := Describe(err)
	require.Equal(t, shared.CodeInvalid, code)
	require.Contains(t, msg, "at most 10 secrets")
	after, err := b.store.SourceGet(ctx, hostID, "github")
	require.NoError(t, err)
	require.Equal(t, before.Secrets, after.Secrets, "unchanged")

	src, err = b.server.ChangeSource(ctx, hostID, "github", &SourceChange{NewSecret: "alone"})
	require.NoError(t, err)
	require.Len(t, src.Secrets, 1)
	require.Equal(t, before.Events, src.Events, "the rest stays")
	require.Equal(t, before.Enabled, src.Enabled)

	_, err = b.server.ChangeSource(ctx, hostID, "github", &SourceChange{NewSecret: string(make([]byte, 5000))})
	code, _ = Describe(err)
	require.Equal(t, shared.CodeInvalid, code, "the API's own bounds")
	_, err = b.server.ChangeSource(ctx, hostID, "nope", &SourceChange{NewSecret: "x"})
	code, _ = Describe(err)
	require.Equal(t, shared.CodeNotFound, code)
}
