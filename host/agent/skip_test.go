package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// Each reason a host skips a webhook says which source and event, and what
// of the host's configuration made it skip: the cloud shows it beside the
// delivery, where an operator decides to fix the host and replay.
func TestSkipReasonNamesTheCause(t *testing.T) {
	w := &shared.Webhook{Source: "github", EventType: "pull_request", EventAction: "opened"}
	for _, c := range []struct {
		name          string
		src           Source
		known, routed bool
		want          string
	}{
		{"unknown source", Source{}, false, false, `this host's configuration has no source "github" (check the name under "webhooks"; ` + "`host run --check`" + ` compares it with the cloud's)`},
		{"disabled", Source{Enabled: false}, true, true, `source "github" is disabled in this host's configuration`},
		{"event", Source{Enabled: true, Events: []string{"push"}}, true, true, `event "pull_request.opened" is not among source "github"'s events in this host's configuration`},
		{"route", Source{Enabled: true}, true, false, `no route of source "github" takes event "pull_request.opened"`},
		{"runs", Source{Enabled: true, Events: []string{"pull_request"}}, true, true, ""},
	} {
		require.Equal(t, c.want, skipReason(w, c.src, c.known, c.routed), c.name)
	}
}
