package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// TestParseFlagsGroups: the group scenarios are scenarios like any other,
// in the default run; -quick shortens the failover and its cloud's lease
// and lateness, which explicit flags still set.
func TestParseFlagsGroups(t *testing.T) {
	c, err := parseFlags(nil)
	require.NoError(t, err)
	require.Subset(t, c.scenarios, []string{"group-intake", "group-drain", "group-failover"})
	require.Zero(t, c.groupLease, "the cloud's default")
	env, lease, late := c.failoverSettings()
	require.Empty(t, env)
	require.Equal(t, 2*time.Minute, lease)
	require.Equal(t, time.Minute, late)

	c, err = parseFlags([]string{"-quick", "-scenarios", "group-intake,group-drain,group-failover", "-group-lease", "30s"})
	require.NoError(t, err)
	require.Equal(t, []string{"group-intake", "group-drain", "group-failover"}, c.scenarios)
	require.Equal(t, 10*time.Second, c.groupFailoverDur)
	env, lease, late = c.failoverSettings()
	require.Equal(t, []string{"RELAY_LEASE=30s", "RELAY_HOST_LATE_AFTER=5s"}, env)
	require.Equal(t, 30*time.Second, lease)
	require.Equal(t, 5*time.Second, late)

	for _, args := range [][]string{
		{"-scenarios", "group-everything"},
		{"-group-rate", "0"},
		{"-group-late-after", "3m"},
		{"-group-lease", "-1s"},
	} {
		_, err := parseFlags(args)
		require.Error(t, err, "%q", args)
	}
}

// TestFailoverBound: a socket's close hands over at once; a long poll's
// member waits for the lease and the lateness.
func TestFailoverBound(t *testing.T) {
	require.Contains(t, failoverBound("websocket", 2*time.Minute, time.Minute), "the socket's close")
	hb := failoverBound("heartbeat", 10*time.Second, 5*time.Second)
	require.Contains(t, hb, "RELAY_LEASE=10s")
	require.Contains(t, hb, "RELAY_HOST_LATE_AFTER=5s")
}

// TestBytesPer: growth and WAL per webhook stored, unknown without a WAL
// position (SQLite) or a webhook.
func TestBytesPer(t *testing.T) {
	g, w := bytesPer(rig.DBBytes{Size: 1000, WAL: 5000}, rig.DBBytes{Size: 5000, WAL: 25000}, 10)
	require.Equal(t, 400.0, g)
	require.Equal(t, 2000.0, w)

	g, w = bytesPer(rig.DBBytes{Size: 4096, WAL: -1}, rig.DBBytes{Size: 8192, WAL: -1}, 4)
	require.Equal(t, 1024.0, g)
	require.Equal(t, -1.0, w)

	g, w = bytesPer(rig.DBBytes{}, rig.DBBytes{Size: 10}, 0)
	require.Equal(t, -1.0, g)
	require.Equal(t, -1.0, w)
}

// TestGroupAgainstOneHost: a group's row is compared with the single
// host's of the same engine and concurrency (or transport), never a failed
// one.
func TestGroupAgainstOneHost(t *testing.T) {
	rows := []intakeRow{
		{engine: "sqlite", conc: 16, cloudCPU: 1, res: loadResult{Rate: 1000}},
		{engine: "sqlite", conc: 64, err: "failed"},
		{engine: "postgres", conc: 16, cloudCPU: 0.5},
	}
	one, ok := singleIntake(rows, "sqlite", 16)
	require.True(t, ok)
	require.Equal(t, 1000.0, one.res.Rate)
	_, ok = singleIntake(rows, "sqlite", 64)
	require.False(t, ok, "a failed run is no comparison")
	_, ok = singleIntake(rows, "sqlite", 256)
	require.False(t, ok)

	// 1,000 µs a webhook in the group, 800 alone: 1.25×.
	require.InDelta(t, 1.25, groupRatio(usPer(1.0, 1000), usPer(0.8, 1000)), 1e-9)
	require.Equal(t, -1.0, groupRatio(-1, 800), "unknown")
	require.Equal(t, -1.0, groupRatio(1000, 0), "unknown")
	require.Equal(t, "1.25×", times(1.25))
	require.Equal(t, "–", times(-1))

	drains := []drainRow{{engine: "sqlite", transport: "websocket", rate: 900}, {engine: "sqlite", transport: "heartbeat", err: "x"}}
	d, ok := singleDrain(drains, "sqlite", "websocket")
	require.True(t, ok)
	require.Equal(t, 900.0, d.rate)
	_, ok = singleDrain(drains, "sqlite", "heartbeat")
	require.False(t, ok)
}

// TestShares: each member's share of a drain, in percent.
func TestShares(t *testing.T) {
	require.Equal(t, []float64{50, 25, 25}, shares([]int{200, 100, 100}))
	require.Equal(t, []float64{0, 0}, shares([]int{0, 0}))
	require.Equal(t, "34 / 33 / 33 %", sharesText([]int{340, 330, 330}))
	require.Equal(t, "100 / 0 / 0 %", sharesText([]int{7, 0, 0}))
	require.Equal(t, "–", sharesText(nil))
	require.Equal(t, 3, sum([]int{1, 2}))
	require.Equal(t, 3, sumStatus([]map[string]int{{"queued": 1, "acked": 5}, {"queued": 2}}, "queued"))
	require.Equal(t, []int{5, 0}, statusOf([]map[string]int{{"acked": 5}, {}}, "acked"))
}

// TestGroupsMarkdown: each group section sets its figures beside the
// single host's of the same run, and a failed run says why.
func TestGroupsMarkdown(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick"})
	require.NoError(t, err)
	b := &bench{cfg: cfg}
	rep := &report{
		intake: []intakeRow{{engine: "sqlite", conc: 16, cloudCPU: 0.8, res: loadResult{Rate: 1000}, dbGrowth: 4000, walPer: -1}},
		groupIntake: []intakeRow{
			{engine: "sqlite", conc: 16, members: 5, cloudCPU: 1.0, res: loadResult{Rate: 1000}, dbGrowth: 6000, walPer: -1},
			{engine: "postgres", conc: 16, members: 5, err: "no webhook accepted"},
		},
		drain:      []drainRow{{engine: "sqlite", transport: "websocket", rate: 1661}},
		groupDrain: []groupDrainRow{{engine: "sqlite", transport: "websocket", members: 3, queued: 5000, held: []int{5000, 0, 0}, acked: []int{5000, 0, 0}, rate: 1495}},
		groupFailover: []groupFailoverRow{{engine: "sqlite", transport: "heartbeat", sent: 500, held: 18, leased: 18, handed: 18,
			p50: 10 * time.Second, max: 10 * time.Second, maxLeased: 10 * time.Second, after: 40, afterMax: 5 * time.Second, bound: "RELAY_LEASE=10s"}},
	}
	var w strings.Builder
	rep.groupsMarkdown(&w, b)
	md := w.String()
	require.Contains(t, md, "| sqlite | 5 | 16 | 1000 | 1000 |", "the rate beside one host's")
	require.Contains(t, md, "| 1000 | 1.25× | 6000 / – | 1.50× / – |", "CPU and bytes against one host")
	require.Contains(t, md, "| postgres | 5 | 16 | failed: no webhook accepted |")
	require.Contains(t, md, "| 5000 | 100 / 0 / 0 % | 0.0 s |", "where the backlog waited")
	require.Contains(t, md, "| 1495 | 1661 | 100 / 0 / 0 % | 0 |", "the group's rate beside one host's")
	require.Contains(t, md, "| 18 + 0 | 18 | 10.0 s | 10.0 s | 10.0 s | – | 40 | 5.0 s | RELAY_LEASE=10s |", "none waiting: –")
	require.Equal(t, "45 ms", secsOf(3, 45*time.Millisecond), "a socket's hand-over")
}
