package agent

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// skewedCloud is the cloud's token endpoint, on a clock of its own: the
// cloud is the process edge of these tests.
type skewedCloud struct {
	mu     sync.Mutex
	now    func() time.Time // the cloud's clock
	ttl    time.Duration
	issued int
	oldAPI bool // answers without its now, as a cloud that predates it
}

func (c *skewedCloud) Token(context.Context, shared.TokenRequest) (shared.TokenResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issued++
	now := c.now()
	r := shared.TokenResponse{Token: "tok", TokenExpiresAt: now.Add(c.ttl), Now: now}
	if c.oldAPI {
		r.Now = time.Time{}
	}
	return r, nil
}

func (c *skewedCloud) Heartbeat(context.Context, string, shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	panic("not used")
}

// TestTokenRenewalOnTheCloudsClock: whether this host's clock is ten
// minutes or an hour ahead or behind the cloud's, or steps while a token
// is held, a 15-minute token is renewed after 12 minutes of its life:
// neither every minute (spinning) nor after it expired (lapsing).
func TestTokenRenewalOnTheCloudsClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute, time.Hour, -time.Hour} {
		host := clockwork.NewFakeClockAt(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		cloud := &skewedCloud{now: func() time.Time { return host.Now().Add(-skew) }, ttl: 15 * time.Minute}
		ct := &cloudTime{log: slog.New(slog.DiscardHandler)}
		ts := &tokenSource{cloud: cloud, clock: host, times: ct}
		ctx := context.Background()
		_, err := ts.Token(ctx)
		require.NoError(t, err)
		got, ok := ct.skew()
		require.True(t, ok)
		require.Equal(t, skew, got, "the skew is learned from the token's answer")
		for range 11 {
			host.Advance(time.Minute)
			_, err := ts.Token(ctx)
			require.NoError(t, err)
		}
		require.Equal(t, 1, cloud.issued, "skew %v: renewed before 80 %% of its lifetime", skew)
		host.Advance(time.Minute + time.Second)
		_, err = ts.Token(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, cloud.issued, "skew %v: not renewed at 80 %% of its lifetime", skew)
	}

	// A cloud that does not say its now: the expiry is read against this
	// host's clock, and one in its past falls back to renewing every
	// minute — early rather than late.
	host := clockwork.NewFakeClockAt(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	cloud := &skewedCloud{now: func() time.Time { return host.Now().Add(-time.Hour) }, ttl: 15 * time.Minute, oldAPI: true}
	ts := &tokenSource{cloud: cloud, clock: host}
	_, err := ts.Token(context.Background())
	require.NoError(t, err)
	host.Advance(48*time.Second + time.Millisecond)
	_, err = ts.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, cloud.issued, "an expiry in this host's past: the one-minute fallback")
}

// TestTokenRenewedWhenTheClockWentBack: a clock that went back (possible
// only for a clock without Go's monotonic reading) renews the token rather
// than keep it for as long as the clock went back.
func TestTokenRenewedWhenTheClockWentBack(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	host := clockwork.NewFakeClockAt(start)
	cloud := &skewedCloud{now: func() time.Time { return start }, ttl: 15 * time.Minute}
	ts := &tokenSource{cloud: cloud, clock: host}
	_, err := ts.Token(context.Background())
	require.NoError(t, err)
	back := clockwork.NewFakeClockAt(start.Add(-time.Hour))
	ts.clock = back
	_, err = ts.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, cloud.issued)
}

// TestCloudTime: the skew is the cloud's now against this host's clock at
// the answer, rounded to the second; a cloud that does not say changes
// nothing.
func TestCloudTime(t *testing.T) {
	t.Parallel()
	ct := &cloudTime{log: slog.New(slog.DiscardHandler)}
	host := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	_, ok := ct.at(host)
	require.False(t, ok)
	ct.observe(host, time.Time{})
	_, ok = ct.skew()
	require.False(t, ok)
	ct.observe(host, host.Add(-10*time.Minute+200*time.Millisecond))
	skew, ok := ct.skew()
	require.True(t, ok)
	require.Equal(t, 10*time.Minute, skew, "this host is ten minutes ahead")
	at, ok := ct.at(host.Add(time.Hour))
	require.True(t, ok)
	require.Equal(t, host.Add(50*time.Minute), at)
}

// TestLeaseLengthFromTheCloud: told the lease the cloud grants, a lease is
// extended a quarter of it after its last renewal, and a busy host
// heartbeats that often; a clock that went back makes every lease due.
func TestLeaseLengthFromTheCloud(t *testing.T) {
	t.Parallel()
	f := newFlow(2, 30*time.Second, slog.New(slog.DiscardHandler))
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	f.admit([]shared.Webhook{{DeliveryID: "a"}}, t0)
	require.Equal(t, busyInterval, f.busy())
	require.Empty(t, f.credit(t0.Add(9*time.Second), false).extends)
	require.Equal(t, []string{"a"}, f.credit(t0.Add(10*time.Second), false).extends, "2-minute default: after 10 s")

	f.setLease(20 * time.Second)
	require.Equal(t, 5*time.Second, f.busy())
	require.Empty(t, f.credit(t0.Add(4*time.Second), false).extends)
	require.Equal(t, []string{"a"}, f.credit(t0.Add(5*time.Second), false).extends)
	f.setLease(0) // not said: unchanged
	require.Equal(t, 5*time.Second, f.busy())

	require.Equal(t, []string{"a"}, f.credit(t0.Add(-time.Hour), false).extends, "the clock went back")
}

// TestExtendsWithinTheCloudsLease: a host with a 10 s heartbeat interval,
// told leases last 4 s, heartbeats every second while a handler runs and
// extends its lease each time (at a 10 s interval the lease would lapse).
func TestExtendsWithinTheCloudsLease(t *testing.T) {
	t.Parallel()
	h := newBlocked()
	b := setup(t, func(b *testBundle) {
		b.handler.fn = h.run
		b.opts = func(o *Options) { o.Interval = 10 * time.Second }
		b.cloud.answer = func(n int, _ shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, LeaseS: 4}
			if n == 1 {
				resp.Webhooks = []shared.Webhook{webhook("d1", "push")}
			}
			return http.StatusOK, resp
		}
	})
	b.next(t)
	<-h.started
	for range 3 {
		b.advance(t, time.Second)
		hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookExtends) > 0 })
		require.Equal(t, []string{"d1"}, hb.req.WebhookExtends)
	}
	close(h.release)
}

// steppedClock is a fake clock whose readings can be stepped back, as a
// clock without Go's monotonic reading could be.
type steppedClock struct {
	*clockwork.FakeClock
	back time.Duration
}

func (c *steppedClock) Now() time.Time { return c.FakeClock.Now().Add(-c.back) }

// TestCadenceWaitsNoLongerThanItEverDoes: a heartbeat planned 5 s ahead,
// then the clock goes back an hour: the cadence waits at most its longest
// wait (the backoff cap here), not the hour.
func TestCadenceWaitsNoLongerThanItEverDoes(t *testing.T) {
	t.Parallel()
	c := &steppedClock{FakeClock: clockwork.NewFakeClock()}
	h := &heartbeats{clock: c, interval: 10 * time.Second, maxBackoff: 30 * time.Second, floor: time.Second}
	next := c.Now().Add(5 * time.Second)
	require.Equal(t, 5*time.Second, h.until(next))
	c.back = time.Hour
	require.Equal(t, 30*time.Second, h.until(next))
}
