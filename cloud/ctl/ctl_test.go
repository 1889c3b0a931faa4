package ctl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

var now = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := now.Add(d); return &t }

func TestLeaseLine(t *testing.T) {
	require.Equal(t, "claimed_until 2026-11-25T08:59:19Z (expired 41s ago)", leaseLine(shared.Delivery{LeaseExpires: at(-41 * time.Second)}, now))
	require.Equal(t, "claimed_until 2026-11-25T09:01:00Z (expires in 1m0s)", leaseLine(shared.Delivery{LeaseExpires: at(time.Minute)}, now))
	require.Empty(t, leaseLine(shared.Delivery{}, now))
}

func TestHoistGlobals(t *testing.T) {
	got, err := hoistGlobals([]string{"hosts", "list", "--url", "http://x", "--json", "--token-file=/t"})
	require.NoError(t, err)
	require.Equal(t, []string{"--url", "http://x", "--token-file=/t", "hosts", "list", "--json"}, got)
	_, err = hoistGlobals([]string{"hosts", "--url"})
	require.Error(t, err)
}

func TestParseSince(t *testing.T) {
	got, err := parseSince("24h", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-24*time.Hour), got)
	got, err = parseSince("2026-11-24T10:00:00Z", now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC), got)
	_, err = parseSince("-1h", now)
	require.Error(t, err)
}
