package agent

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// TestSubscriptionSentOnceThenOnChange: the subscription goes with the first
// heartbeat after start, is not repeated while unchanged, goes again when a
// reload changes it, and not when a reload leaves it equal.
func TestSubscriptionSentOnceThenOnChange(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	hb := b.next(t)
	require.NotNil(t, hb.req.Config)
	require.Equal(t, []string{"pull_request", "push"}, hb.req.Config.Webhooks["github"].Events)

	b.advance(t, 30*time.Second)
	require.Nil(t, b.next(t).req.Config, "unchanged: not sent again")

	changed := &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{
		"github": {Enabled: true, Events: []string{"push"}},
		"slack":  {Enabled: true},
	}}
	b.agent.Reload(b.sources, changed)
	// The change goes out without waiting for the 30 s interval: at the 1 s floor.
	b.advance(t, time.Second)
	hb = b.nextWhere(t, func(hb heartbeatSeen) bool { return hb.req.Config != nil })
	require.Equal(t, changed, hb.req.Config)

	b.agent.Reload(b.sources, &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{
		"slack":  {Enabled: true},
		"github": {Enabled: true, Events: []string{"push"}},
	}})
	b.advance(t, time.Second)
	require.Nil(t, b.next(t).req.Config, "an equal subscription is not news")
}

// TestSubscriptionResentUntilAccepted: a heartbeat that failed did not
// deliver the subscription, so the next one carries it again.
func TestSubscriptionResentUntilAccepted(t *testing.T) {
	t.Parallel()
	b, hb := setupFailingFirst(t, http.StatusBadGateway)
	require.NotNil(t, hb.req.Config)
	b.advance(t, 30*time.Second)
	hb = b.next(t)
	require.Equal(t, http.StatusOK, hb.status)
	require.NotNil(t, hb.req.Config)
	b.advance(t, 30*time.Second)
	require.Nil(t, b.next(t).req.Config)
}

// TestNoSubscriptionNeverSent: a host without one leaves the cloud's as is.
func TestNoSubscriptionNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *testBundle) { b.opts = func(o *Options) { o.Subscription = nil } })
	require.Nil(t, b.next(t).req.Config)
}
