package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hostClock is the clock part of a host's /healthz.
type hostClock struct {
	HostNow  time.Time  `json:"host_now"`
	CloudNow *time.Time `json:"cloud_now"`
	SkewS    *int64     `json:"skew_s"`
}

func (h *host) clock() hostClock {
	h.t.Helper()
	resp, err := http.Get("http://" + h.listen + "/healthz")
	require.NoError(h.t, err)
	defer resp.Body.Close()
	var out struct {
		Clock hostClock `json:"clock"`
	}
	require.NoError(h.t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Clock
}

// TestHostWithAWrongClock runs a host whose clock is ten minutes or an hour
// ahead or behind the cloud's, or steps an hour forward or back while a
// handler runs (RELAY_HOST_TEST_CLOCK_OFFSET), against a cloud with a 4 s
// lease and a host heartbeat interval of 10 s: the host extends the long
// handler's lease within a quarter of the lease the cloud says, on its
// monotonic clock (a 10 s busy interval would let it lapse), so it runs
// once on its first attempt; webhooks whose handler fails once are
// retried; every webhook runs exactly once to success; the local API says
// how far the host's clock is from the cloud's.
func TestHostWithAWrongClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		offset string
		skew   time.Duration // at the end
	}{
		{"10m-ahead", "+10m", 10 * time.Minute},
		{"10m-behind", "-10m", -10 * time.Minute},
		{"1h-ahead", "+1h", time.Hour},
		{"1h-behind", "-1h", -time.Hour},
		{"steps-1h-forward", "0s,+1h@4s", time.Hour},
		{"steps-1h-back", "+10m,-1h@4s", -50 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newHostSetup(t, "clock", "RELAY_LEASE=4s")
			runs := newRunLog(t)
			// Deliveries named "fail" fail their first attempt; "long"
			// runs 9 s, over two leases.
			handler := script(t, `case "$RELAY_DELIVERY_ID" in
*fail*) if [ "$RELAY_ATTEMPT" = 1 ]; then echo "$RELAY_DELIVERY_ID failed" >> "$1"; exit 1; fi ;;
esac
case "$RELAY_DELIVERY_ID" in
*long*) sleep 9 ;;
esac
echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT" >> "$1"
`)
			h := s.startConfiguredHost(t, s.cloud.url, map[string]any{
				"heartbeat_interval_s": 10,
				"webhooks": map[string]any{"github": map[string]any{
					"enabled": true, "parallel": true, "exec": []string{handler, string(runs)}, "timeout_s": 60,
				}},
			}, "RELAY_HOST_TEST_CLOCK_OFFSET="+tc.offset)
			body := hostPayload(t, "github/push.json")
			var ids []string
			send := func(name string) {
				ids = append(ids, sendGitHub(t, s.cloud.url, s.hostID, "push", name, body))
			}
			send("long")
			for i := range 6 {
				if i%3 == 0 {
					send(fmt.Sprintf("fail-%d", i))
				} else {
					send(fmt.Sprintf("quick-%d", i))
				}
			}
			// After the step, if any: once the host's clock, as its local
			// API reads it, is off by what it ends at. (The step comes on
			// the host process's real clock, which no test can fake: this
			// waits on what it shows, not on time.)
			eventually(t, 30*time.Second, "the host's clock stepped, if it steps", func() bool {
				return (h.clock().HostNow.Sub(time.Now()) - tc.skew).Abs() < 2*time.Second
			})
			for i := range 6 {
				if i%3 == 0 {
					send(fmt.Sprintf("fail-late-%d", i))
				} else {
					send(fmt.Sprintf("quick-late-%d", i))
				}
			}

			eventually(t, 60*time.Second, "every webhook acked", func() bool {
				return len(s.cloud.deliveries(s.hostID, "acked")) == len(ids)
			})
			var want []string
			for _, id := range ids {
				attempt := 1
				if strings.Contains(id, "fail") {
					attempt = 2
				}
				want = append(want, fmt.Sprintf("%s %d", id, attempt))
			}
			var got []string
			for _, l := range runs.lines() {
				if !strings.HasSuffix(l, " failed") {
					got = append(got, l)
				}
			}
			sort.Strings(want)
			sort.Strings(got)
			require.Equal(t, want, got, "each ran to success exactly once, on the attempt expected")
			long := s.cloud.delivery(s.hostID, ids[0])
			require.Equal(t, 1, long.Delivery.Attempts, "the long handler's lease was extended in time: %s", long.reasons())
			require.NotContains(t, long.reasons(), "lease expired")

			c := h.clock()
			require.NotNil(t, c.SkewS, "the cloud said its time")
			require.InDelta(t, tc.skew.Seconds(), float64(*c.SkewS), 2, "skew as the host reports it")
			require.WithinDuration(t, time.Now(), *c.CloudNow, 3*time.Second, "the cloud's time, as the host reports it")
			require.WithinDuration(t, time.Now().Add(tc.skew), c.HostNow, 3*time.Second)
			log, err := os.ReadFile(h.logPath)
			require.NoError(t, err)
			require.Contains(t, string(log), "test clock armed")
			require.Contains(t, string(log), "this host's clock is off from the cloud's")
		})
	}
}

// TestHostLedgerRetentionWithAClockAhead: a host restarted with its clock
// two days ahead, with a one-day ledger retention, keeps the rows it
// recorded minutes ago: their age is measured against the cloud's time
// too, and nothing is pruned before the cloud said it. (Measured on the
// host's clock alone, retention at start would prune them, and a webhook
// handed out again would run a second time.)
func TestHostLedgerRetentionWithAClockAhead(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "retention")
	runs := newRunLog(t)
	handler := script(t, `echo "$RELAY_DELIVERY_ID $RELAY_ATTEMPT" >> "$1"
`)
	h := s.startConfiguredHost(t, s.cloud.url, execTo([]string{handler, string(runs)}, map[string]any{"ledger_retention_days": 1}))
	id := sendGitHub(t, s.cloud.url, s.hostID, "push", "before-the-step", hostPayload(t, "github/push.json"))
	eventually(t, 30*time.Second, "acked", func() bool { return s.cloud.delivery(s.hostID, id).Delivery.Status == "acked" })

	h.restartWith("RELAY_HOST_TEST_CLOCK_OFFSET=+49h")
	eventually(t, 30*time.Second, "the host heard the cloud's time", func() bool {
		resp, err := http.Get("http://" + h.listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		c := h.clock()
		return c.SkewS != nil && *c.SkewS > 48*3600
	})
	// A second for retention to act on it, had it wanted to. This wait stays
	// real: retention runs on the host process's own timers, which no test
	// can fake, and a pass that prunes nothing leaves no trace (log line,
	// API field) to wait on instead.
	time.Sleep(time.Second)
	require.Equal(t, "success", h.ledgerResult(id), "today's row kept")
	log, err := os.ReadFile(h.logPath)
	require.NoError(t, err)
	require.NotContains(t, string(log), "old entries pruned")
	require.Equal(t, []string{id + " 1"}, runs.lines(), "ran once")
}
