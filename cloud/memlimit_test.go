package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGoMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	noEnv := func(string) (string, bool) { return "", false }

	const db = "sqlite:./data/cloud.db"
	debug.SetMemoryLimit(math.MaxInt64)
	require.Nil(t, goMemoryLimit(0, db, noEnv), "0: no limit")
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
	require.Nil(t, goMemoryLimit(32, "postgres://relay@db/relay", noEnv), "SQLite only")
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
	withEnv := func(k string) (string, bool) { return "64MiB", k == "GOMEMLIMIT" }
	require.Nil(t, goMemoryLimit(32, db, withEnv), "GOMEMLIMIT is the runtime's")
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))

	inflight := goMemoryLimit(32, db, noEnv)
	require.NotNil(t, inflight)
	require.Equal(t, int64(32<<20), debug.SetMemoryLimit(-1))
	inflight(5 << 20)
	require.Equal(t, int64(37<<20), debug.SetMemoryLimit(-1), "raised by the bodies in flight")
	inflight(0)
	require.Equal(t, int64(32<<20), debug.SetMemoryLimit(-1))
}
