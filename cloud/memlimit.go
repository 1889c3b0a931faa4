package main

import (
	"runtime/debug"
	"strings"
)

// goMemoryLimit sets Go's soft memory limit (debug.SetMemoryLimit) to mb
// MiB of what its runtime holds: heap, goroutine stacks and its own
// structures, not SQLite's page cache or the binary. GOGC stays at 100:
// the collector runs sooner only while the heap would otherwise grow past
// the limit. At 256 concurrent senders of the bench's payload mix, 32 MiB
// took the embedded cloud's peak RSS from 65 to 61–63 MiB for no CPU per
// webhook that the runs could tell apart. It is off by default: what held
// connections take counts against it too, and 2,000 idle sockets under
// 32 MiB kept the collector running back to back (54 % of a core against
// 8 % without the limit).
//
// The limit is raised by the request bodies intake holds (the function it
// returns is told their bytes): those must stay in memory, and a limit
// below them would have the collector run back to back for nothing.
//
// It bounds the embedded cloud only (databaseURL sqlite:…): on Postgres
// the cloud's Go memory at 256 senders is 45–55 MiB of its own (the
// driver's buffers), and 32 MiB doubled its CPU per webhook (451–536 µs
// against 218–279). 0, or GOMEMLIMIT in the environment (which the
// runtime applies itself), leaves the limit alone too; it then returns
// nil.
func goMemoryLimit(mb int, databaseURL string, getenv func(string) (string, bool)) func(inflight int64) {
	if _, ok := getenv("GOMEMLIMIT"); ok || mb <= 0 || !strings.HasPrefix(databaseURL, "sqlite:") {
		return nil
	}
	base := int64(mb) << 20
	debug.SetMemoryLimit(base)
	return func(inflight int64) { debug.SetMemoryLimit(base + inflight) }
}
