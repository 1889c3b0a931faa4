package intake

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/shared"
)

// The answers are bounded by bytes as well as entries.
func TestTargetCacheBoundedBytes(t *testing.T) {
	now := clockwork.NewFakeClock().Now()
	const maxBytes = 20 * (entryOverhead + 100)
	c := newTargetCache(TargetTTL, targetCacheFound, cacheBounds{entries: 1000, bytes: maxBytes})
	notFound := func() (*Target, error) { return nil, shared.NotFound("no such source on this host") }
	for i := range 500 {
		_, err := c.get(auth.NewHostID(), strings.Repeat("s", 60)+strconv.Itoa(i), now, notFound)
		require.Error(t, err)
		entries, bytes := c.len()
		require.LessOrEqual(t, bytes, int64(maxBytes))
		require.LessOrEqual(t, entries, 20)
	}
	entries, _ := c.len()
	require.Greater(t, entries, 10, "the bound is used, not cleared")
}

// Expired entries go even when no one asks for them again: any use of
// the cache removes them.
func TestTargetCacheEvictsExpired(t *testing.T) {
	clock := clockwork.NewFakeClock()
	c := newTargetCache(TargetTTL, targetCacheFound, targetCacheMissing)
	loads := 0
	notFound := func() (*Target, error) { loads++; return nil, shared.NotFound("no such host") }
	for range 100 {
		_, _ = c.get(auth.NewHostID(), "github", clock.Now(), notFound)
	}
	entries, bytes := c.len()
	require.Equal(t, 100, entries)
	require.Positive(t, bytes)

	known := auth.NewHostID()
	_, _ = c.get(known, "github", clock.Now(), notFound)
	clock.Advance(TargetTTL / 2)
	_, _ = c.get(known, "github", clock.Now(), notFound)
	require.Equal(t, 101, loads, "cached until it expires")

	clock.Advance(TargetTTL / 2)
	_, _ = c.get(auth.NewHostID(), "github", clock.Now(), notFound)
	entries, _ = c.len()
	require.Equal(t, 1, entries, "every entry older than the ttl went; the new one stays")

	clock.Advance(TargetTTL)
	_, _ = c.get(known, "github", clock.Now(), notFound)
	require.Equal(t, 103, loads)
	entries, bytes = c.len()
	require.Equal(t, 1, entries)

	c.drop(known)
	entries, bytes = c.len()
	require.Zero(t, entries)
	require.Zero(t, bytes)
	c.mu.Lock()
	require.Empty(t, c.hosts)
	c.mu.Unlock()
}
