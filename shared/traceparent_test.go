package shared

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTraceParent(t *testing.T) {
	const v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp, ok := ParseTraceParent(v)
	require.True(t, ok)
	require.Equal(t, v, tp.String())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", TraceIDOf(v))

	child := ContinueTraceParent(v)
	require.Equal(t, tp.TraceID, child.TraceID, "the same trace")
	require.NotEqual(t, tp.SpanID, child.SpanID, "a new span")
	require.Equal(t, byte(1), child.Flags)

	// A future version may carry more fields after the flags.
	_, ok = ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
	require.True(t, ok)
	for _, bad := range []string{"", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		_, ok := ParseTraceParent(bad)
		require.False(t, ok, bad)
		fresh := ContinueTraceParent(bad)
		require.NotEqual(t, [16]byte{}, fresh.TraceID, "a new trace")
		require.Equal(t, TraceIDOf(fresh.String()) != "", true)
	}
}
