package limits

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAuthLimiterBounded: the limiter remembers at most max clients,
// forgetting the least recently seen; a remembered client keeps its count.
func TestAuthLimiterBounded(t *testing.T) {
	now := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	l := NewAuthLimiter(2, 3)
	fail := func(client string) bool {
		_, wait := l.Take(client, now)
		return wait == 0
	}
	require.True(t, fail("a"))
	require.True(t, fail("a"))
	require.False(t, fail("a"), "a is out of tokens")
	for i := 0; i < 1000; i++ {
		fail(fmt.Sprintf("flood-%d", i))
		require.LessOrEqual(t, l.Size(), 3)
	}
	require.Equal(t, 3, l.Size())
	require.True(t, fail("a"), "a was forgotten by the flood: a fresh bucket")

	// The most recently seen stay: b, touched again, outlives c.
	l = NewAuthLimiter(1, 2)
	require.True(t, fail("b"))
	require.True(t, fail("c"))
	require.False(t, fail("b"))
	require.True(t, fail("d"), "d evicts c, the least recently seen")
	require.False(t, fail("b"), "b is still remembered, out of tokens")

	// A refund gives the token back; refills stop at the bucket's size.
	l = NewAuthLimiter(1, 10)
	refund, wait := l.Take("e", now)
	require.Zero(t, wait)
	refund()
	_, wait = l.Take("e", now)
	require.Zero(t, wait)
	_, wait = l.Take("e", now)
	require.Equal(t, time.Minute, wait)
	_, wait = l.Take("e", now.Add(time.Hour))
	require.Zero(t, wait)
	_, wait = l.Take("e", now.Add(time.Hour))
	require.Equal(t, time.Minute, wait, "an hour refills one token, not sixty")
}
