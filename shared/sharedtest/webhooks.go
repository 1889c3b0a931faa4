// Package sharedtest holds what tests of several packages build the same
// way from the wire protocol's shapes.
package sharedtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaykit/relay/shared"
)

// BenchWebhooks is n leased webhooks with real payloads as the cloud hands
// them out (the headers GitHub sends, a trace context): the JSON files of
// scripts/bench/testdata in turn, the first one grown to a 300 KB push.
// The benchmarks of frame and answer encodings read them.
func BenchWebhooks(tb testing.TB, n int) []shared.Webhook {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(moduleRoot(tb), "scripts", "bench", "testdata", "*", "*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("bench payloads: %v (%d files)", err, len(files))
	}
	hooks := make([]shared.Webhook, n)
	for i := range hooks {
		body, err := os.ReadFile(files[i%len(files)])
		if err != nil {
			tb.Fatal(err)
		}
		if i == 0 {
			body = append(body[:len(body)-1:len(body)-1], []byte(`,"padding":"`+string(bytes.Repeat([]byte("x"), 300<<10))+`"}`)...)
		}
		hooks[i] = shared.Webhook{DeliveryID: fmt.Sprintf("github:6f1c2d3e-8a9b-4c5d-9e0f-%012d:1", i), Source: "github", EventType: "push",
			Headers: map[string]string{"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/a1b2c3d",
				"X-GitHub-Delivery": "6f1c2d3e-8a9b-4c5d-9e0f-1a2b3c4d5e6f", "X-GitHub-Event": "push", "X-GitHub-Hook-ID": "123456789",
				"X-Hub-Signature-256": "sha256=0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
				"Traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			RawBody: body, ReceivedAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), Attempt: 1, CorrelationID: "6f1c2d3e-8a9b-4c5d-9e0f-1a2b3c4d5e6f"}
	}
	return hooks
}

// BenchBatch is a batch of BenchWebhooks a benchmark encodes or decodes.
type BenchBatch struct {
	Name  string // "1" or "100"
	Hooks []shared.Webhook
	Bytes int // the raw bodies' bytes, for SetBytes
}

// BenchBatches are the two batches the encoding benchmarks measure: one
// webhook of the mix (the second: the first is the 300 KB push) and a
// drain's batch of 100.
func BenchBatches(tb testing.TB) []BenchBatch {
	tb.Helper()
	hooks := BenchWebhooks(tb, 100)
	out := []BenchBatch{{Name: "1", Hooks: hooks[1:2]}, {Name: "100", Hooks: hooks}}
	for i := range out {
		for _, w := range out[i].Hooks {
			out[i].Bytes += len(w.RawBody)
		}
	}
	return out
}

// moduleRoot is the directory of the module's go.mod, above the test's.
func moduleRoot(tb testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
