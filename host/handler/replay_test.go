package handler

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// A replay's program is told which delivery it replays; any other run has
// no RELAY_REPLAY_OF, not even the host's own.
func TestEnvNamesTheReplayedDelivery(t *testing.T) {
	t.Setenv("RELAY_REPLAY_OF", "inherited-must-not-leak")
	w := shared.Webhook{DeliveryID: "github:d-1~replay-5:6", Source: "github",
		Headers: map[string]string{"x-relay-replay-of": "github:d-1:4"}}
	env := Env(Job{Webhook: w})
	require.Contains(t, env, "RELAY_REPLAY_OF=github:d-1:4")
	require.Contains(t, env, "IDEMPOTENCY_KEY=github:d-1~replay-5:6", "the replay's own id: its handler runs it")

	w.Headers = nil
	require.False(t, slices.ContainsFunc(Env(Job{Webhook: w}), func(kv string) bool { return len(kv) > 16 && kv[:16] == "RELAY_REPLAY_OF=" }))
	require.NotContains(t, inherited(), "RELAY_REPLAY_OF=inherited-must-not-leak")
}

// A group's webhook tells its program the group; any other run has no
// RELAY_GROUP, not even the host's own.
func TestEnvNamesTheGroup(t *testing.T) {
	t.Setenv("RELAY_GROUP", "inherited-must-not-leak")
	w := shared.Webhook{DeliveryID: "github:d-1:1764230400000", Source: "github",
		Headers: map[string]string{"x-relay-group": "g_0123456789abcdefghjkmnpqrs"}}
	env := Env(Job{Webhook: w})
	require.Contains(t, env, "RELAY_GROUP=g_0123456789abcdefghjkmnpqrs")
	require.Contains(t, env, "IDEMPOTENCY_KEY=github:d-1:1764230400000")

	w.Headers = nil
	require.False(t, slices.ContainsFunc(Env(Job{Webhook: w}), func(kv string) bool { return strings.HasPrefix(kv, "RELAY_GROUP=") }))
	require.NotContains(t, inherited(), "RELAY_GROUP=inherited-must-not-leak")
}
