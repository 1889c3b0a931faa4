package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckGroups(t *testing.T) {
	t.Parallel()
	fan := &group{id: "g_fan", mode: "fanout", members: []string{"h_a", "h_b"}}
	anyg := &group{id: "g_any", mode: "any", members: []string{"h_a", "h_b"}}
	names := map[string]string{"h_a": "a", "h_b": "b", "h_c": "c"}
	r := func(key, member, g string) groupRun { return groupRun{key: key, member: member, group: g} }

	t.Run("as promised", func(t *testing.T) {
		t.Parallel()
		accepted := map[string]*group{"e1": fan, "e2": anyg, "e3": anyg}
		runs := map[string][]groupRun{
			"e1": {r("github:e1:h_a:1", "h_a", "g_fan"), r("github:e1:h_b:1", "h_b", "g_fan")},
			"e2": {r("github:e2:1", "h_a", "g_any")},
			// Run, its holder gone before the ack, run again elsewhere.
			"e3": {r("github:e3:1", "h_a", "g_any"), r("github:e3:1", "h_b", "g_any")},
		}
		f, failures := checkGroups(accepted, runs, names)
		require.Empty(t, failures)
		require.Equal(t, groupFindings{fanoutAccepted: 1, fanoutOnce: 1, anyAccepted: 2, anyHandled: 2, anySecondRuns: 1, anyTwice: 1,
			anyByMember: map[string]int{"a": 2, "b": 1}}, f)
	})

	t.Run("broken", func(t *testing.T) {
		t.Parallel()
		accepted := map[string]*group{"e1": fan, "e2": fan, "e3": anyg, "e4": anyg, "e5": fan}
		runs := map[string][]groupRun{
			"e1": {r("github:e1:h_a:1", "h_a", "g_fan")},                                         // b never ran it
			"e2": {r("k2a", "h_a", "g_fan"), r("k2a", "h_a", "g_fan"), r("k2b", "h_b", "g_fan")}, // a twice
			"e3": {r("k3", "h_a", "g_any"), r("k3-other", "h_b", "g_any")},                       // two keys
			"e5": {r("k5a", "h_a", "g_fan"), r("k5b", "h_b", "g_fan"), r("k5c", "h_c", "g_fan")},
			"e9": {r("k9", "h_a", "g_any")}, // never answered 2xx
		}
		f, failures := checkGroups(accepted, runs, names)
		require.Len(t, failures, 5, "%q", failures)
		require.Contains(t, failures[0], "never handled by a member: 2 (e1 at b, e4 at any member)")
		require.Contains(t, failures[1], "more than once by a member: 1 (e2 at a (2))")
		require.Contains(t, failures[2], "not of their group: 1 (e5 by h_c of g_fan)")
		require.Contains(t, failures[3], "wrong Idempotency-Keys: 1 (e3 (2 runs under 2 Idempotency-Keys))")
		require.Contains(t, failures[4], "never answered 2xx: 1 (e9)")
		require.Equal(t, 1, f.fanoutOnce) // e5: each member once, and a stranger
		require.Equal(t, 1, f.anySecondRuns)
	})
}

func TestLinkPattern(t *testing.T) {
	t.Parallel()
	// As the host page renders its connection (host/localapi's overview).
	page := `<dt>Transport</dt><dd><strong id="transport">websocket</strong> since <time>2026-02-16 11:00:00</time> (1 h 0 min ago) <span class="muted">(configured: auto)</span></dd>
<dt>Sockets opened</dt><dd>3 (2 reconnects) · fallbacks to heartbeats: 1</dd>`
	m := transportRE.FindStringSubmatch(page)
	require.Equal(t, []string{"websocket", "auto"}, m[1:])
	m = socketsRE.FindStringSubmatch(page)
	require.Equal(t, []string{"3", "1"}, m[1:])

	m = transportRE.FindStringSubmatch(`<strong id="transport">not connected</strong> <span class="muted">(configured: heartbeat)</span>`)
	require.Equal(t, []string{"not connected", "heartbeat"}, m[1:])
}
