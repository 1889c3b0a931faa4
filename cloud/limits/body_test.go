package limits

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
		"not an address":       "not an address",
	} {
		require.Equal(t, want, AddrKey(in), in)
	}
}

// Large bodies fill at most three quarters of the budget in all and of a
// host's share; the last quarter stays for small ones, whatever the number
// of addresses posting large bodies.
func TestBodyBudgetKeepsRoomForSmallBodies(t *testing.T) {
	const mib = 1 << 20
	b := NewBodyBudget(clockwork.NewFakeClock(), time.Second, 8*mib, 8*mib, 4*mib)
	b.small = mib
	take := func(host, ip string, n int64) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		l := b.Lease(host, ip)
		if err := b.over(l, n); err != nil {
			return err
		}
		b.used += n
		b.hosts[l.host] += n
		b.ips[l.ip] += n
		l.held += n
		return nil
	}
	// Large bodies from three addresses: the third would pass three quarters.
	require.NoError(t, take("h_a", "192.0.2.1", 3*mib))
	require.NoError(t, take("h_a", "192.0.2.2", 3*mib))
	err := take("h_a", "192.0.2.3", 2*mib)
	var over *OverBudgetError
	require.ErrorAs(t, err, &over)
	require.Equal(t, "per host", over.share)
	// A small body from the host's provider still fits, twice.
	require.NoError(t, take("h_a", "198.51.100.7", mib))
	require.NoError(t, take("h_a", "198.51.100.7", mib))
	// The whole budget is then held: even a small one waits.
	require.Error(t, take("h_b", "198.51.100.8", 1))

	// In all, across hosts: large bodies stop at three quarters there too.
	b = NewBodyBudget(clockwork.NewFakeClock(), time.Second, 8*mib, 8*mib, 8*mib)
	b.small = mib
	require.NoError(t, take("h_a", "192.0.2.1", 3*mib))
	require.NoError(t, take("h_b", "192.0.2.2", 3*mib))
	require.ErrorAs(t, take("h_c", "192.0.2.3", 2*mib), &over)
	require.Equal(t, "in all", over.share)
	require.NoError(t, take("h_c", "198.51.100.9", mib))
	require.NoError(t, take("h_c", "198.51.100.9", mib))
}

// The bytes held in all are told after each change, in order: the cloud
// raises Go's memory limit by them.
func TestBodyBudgetChanged(t *testing.T) {
	ctx := context.Background()
	b := NewBodyBudget(clockwork.NewFakeClock(), time.Second, 1000, 1000, 1000)
	var told []int64
	b.Changed = func(used int64) { told = append(told, used) }
	a, c := b.Lease("h_a", "192.0.2.1"), b.Lease("h_b", "192.0.2.2")
	require.NoError(t, a.Grow(ctx, 300))
	require.NoError(t, c.Grow(ctx, 200))
	require.NoError(t, a.Grow(ctx, 100))
	a.Release()
	a.Release() // nothing held: nothing to tell
	c.Release()
	require.Equal(t, []int64{300, 500, 600, 200, 0}, told)
}
