package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// Flow control on its own, as any transport uses it: what it admits, the
// room it gives, the leases it says are due for an extend.
func TestFlowAdmitsOnceAndExtendsDueLeases(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	f := newFlow(2, 30*time.Second, slog.New(slog.DiscardHandler))

	fresh := f.admit([]shared.Webhook{webhook("github:c:1", "push"), webhook("github:a:1", "push"), webhook("github:b:1", "push")}, t0)
	require.Len(t, fresh, 3)
	require.Equal(t, "github:c:1", fresh[0].DeliveryID, "in the order leased")
	// Handed out again: not started twice, its lease renewed.
	require.Empty(t, f.admit([]shared.Webhook{webhook("github:b:1", "push")}, t0.Add(5*time.Second)))
	require.Equal(t, 3, f.count())

	c := f.credit(t0.Add(extendAfter), false)
	require.Equal(t, 2*queuePerWorker-3, c.free)
	require.False(t, c.idle)
	require.Equal(t, []string{"github:a:1", "github:c:1"}, c.extends, "due, sorted; b was renewed 5 s ago")
	require.Nil(t, c.held, "held only when asked")
	c = f.credit(t0.Add(extendAfter), true)
	require.Equal(t, []string{"github:a:1", "github:b:1", "github:c:1"}, c.held)

	f.extended(append(c.extends, "github:gone:1"), t0.Add(extendAfter))
	require.Equal(t, 3, f.count(), "an extend of a webhook not in flight adds nothing")
	require.Equal(t, []string{"github:b:1"}, f.credit(t0.Add(15*time.Second), false).extends)

	f.release("github:a:1", "github:b:1", "github:c:1")
	c = f.credit(t0.Add(time.Hour), true)
	require.True(t, c.idle)
	require.Empty(t, c.extends)
	require.Equal(t, 2*queuePerWorker, c.free)
}

// A short heartbeat interval extends leases sooner than extendAfter.
func TestFlowExtendsWithinAShortInterval(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	f := newFlow(1, 3*time.Second, slog.New(slog.DiscardHandler))
	f.admit([]shared.Webhook{webhook("github:a:1", "push")}, t0)
	require.Empty(t, f.credit(t0.Add(2*time.Second), false).extends)
	require.Equal(t, []string{"github:a:1"}, f.credit(t0.Add(3*time.Second), false).extends)
}

// The window doubles while the cloud has more and the workers ran dry, up to
// maxWindow, and falls back once the cloud has nothing more; room for more
// is half the window free.
func TestFlowWindowGrowsWhenDryAndFallsBack(t *testing.T) {
	t.Parallel()
	f := newFlow(2, 30*time.Second, slog.New(slog.DiscardHandler))
	window := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.window
	}
	require.Equal(t, 16, window())
	f.adjust(true, false, true)
	require.Equal(t, 16, window(), "not dry: the window covered the round trip")
	f.adjust(false, true, true)
	require.Equal(t, 16, window(), "dry but not draining")
	for want := 32; want <= maxWindow; want *= 2 {
		f.adjust(true, true, true)
		require.Equal(t, want, window())
	}
	f.adjust(true, true, true)
	require.Equal(t, maxWindow, window(), "capped")
	f.adjust(false, false, false)
	require.Equal(t, 16, window(), "the backlog is gone")

	now := time.Now()
	for i := range 8 {
		f.admit([]shared.Webhook{webhook("github:"+string(rune('a'+i))+":1", "push")}, now)
	}
	require.True(t, f.roomForMore(), "8 of 16 free")
	f.admit([]shared.Webhook{webhook("github:z:1", "push")}, now)
	require.False(t, f.roomForMore(), "7 of 16 free")
}
