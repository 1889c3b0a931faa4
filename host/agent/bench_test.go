package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// benchCloud plays the cloud's heartbeat endpoint for a backlog of queued
// deliveries: it leases up to max_webhooks per heartbeat (at most
// MaxMaxWebhooks), says "more" while deliveries are left, and counts acks.
// Webhooks are encoded up front so that the cloud's own cost stays small.
type benchCloud struct {
	b *testing.B

	mu         sync.Mutex
	encoded    [][]byte // the backlog, in order, as JSON
	next       int      // index of the next delivery to lease
	acked      []bool
	nAcked     int
	heartbeats int
	batches    []int // size of each non-empty lease
	done       chan struct{}
	doneAt     time.Time
}

func newBenchCloud(b *testing.B, n int, source string, body []byte) *benchCloud {
	bc := &benchCloud{b: b, acked: make([]bool, n), done: make(chan struct{})}
	raw := json.RawMessage(body)
	for i := range n {
		w := shared.Webhook{
			DeliveryID:  fmt.Sprintf("%s:%d:1", source, i),
			Source:      source,
			EventType:   "pull_request",
			EventAction: "opened",
			Headers: map[string]string{
				"content-type":        "application/json",
				"user-agent":          "GitHub-Hookshot/1",
				"x-github-event":      "pull_request",
				"x-github-delivery":   fmt.Sprintf("72d3162e-cc78-11e3-81ab-%012d", i),
				"x-hub-signature-256": "sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			},
			Body:          raw,
			RawBody:       body,
			ReceivedAt:    time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC),
			Attempt:       1,
			CorrelationID: fmt.Sprintf("corr-%d", i),
		}
		data, err := json.Marshal(w)
		if err != nil {
			b.Fatal(err)
		}
		bc.encoded = append(bc.encoded, data)
	}
	return bc
}

func (bc *benchCloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case shared.PathToken:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(shared.TokenResponse{Token: "tok", TokenExpiresAt: time.Now().Add(time.Hour)})
		return
	case shared.PathHeartbeat:
	default:
		http.NotFound(w, r)
		return
	}
	var req shared.HeartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		bc.b.Errorf("decode heartbeat: %v", err)
		return
	}
	bc.mu.Lock()
	bc.heartbeats++
	for _, n := range req.WebhookNacks {
		bc.b.Errorf("nack: %+v", n)
	}
	for _, id := range req.WebhookAcks {
		i := index(id)
		if i < 0 || i >= len(bc.acked) {
			bc.b.Errorf("ack of unknown delivery %q", id)
			continue
		}
		if !bc.acked[i] {
			bc.acked[i] = true
			bc.nAcked++
			if bc.nAcked == len(bc.acked) {
				bc.doneAt = time.Now()
				close(bc.done)
			}
		}
	}
	max := shared.DefaultMaxWebhooks
	if req.MaxWebhooks != nil {
		max = min(*req.MaxWebhooks, shared.MaxMaxWebhooks)
	}
	from := bc.next
	to := min(from+max, len(bc.encoded))
	bc.next = to
	if to > from {
		bc.batches = append(bc.batches, to-from)
	}
	more := to < len(bc.encoded)
	var out bytes.Buffer
	out.Grow(64 + (to-from)*(len(bc.encoded[0])+1))
	fmt.Fprintf(&out, `{"status":"ok","heartbeat_interval_s":1,"more":%t,"webhooks":[`, more)
	for i := from; i < to; i++ {
		if i > from {
			out.WriteByte(',')
		}
		out.Write(bc.encoded[i])
	}
	out.WriteString("]}")
	bc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(out.Bytes())
}

// index reads the number out of "source:N:1".
func index(id string) int {
	_, rest, _ := strings.Cut(id, ":")
	n, _, _ := strings.Cut(rest, ":")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

// benchBody is a GitHub pull_request payload of about 1 KiB.
var benchBody = []byte(`{"action":"opened","number":7,"pull_request":{"url":"https://api.github.com/repos/acme/app/pulls/7",` +
	`"id":1,"html_url":"https://github.com/acme/app/pull/7","number":7,"state":"open","locked":false,` +
	`"title":"Make the host drain fast","user":{"login":"octocat","id":1,"type":"User"},` +
	`"body":"This pull request makes the host drain a backlog quickly without weakening its guarantees.",` +
	`"created_at":"2026-02-16T10:00:00Z","updated_at":"2026-02-16T10:00:00Z","draft":false,` +
	`"head":{"label":"acme:fast","ref":"fast","sha":"6dcb09b5b57875f334f61aebed695e2e4193db5e"},` +
	`"base":{"label":"acme:main","ref":"main","sha":"9049f1265b7d61be4a8904a9a27120d2064dab3b"},` +
	`"merged":false,"comments":0,"commits":3,"additions":120,"deletions":40,"changed_files":5},` +
	`"repository":{"id":1296269,"name":"app","full_name":"acme/app","private":false,` +
	`"owner":{"login":"acme","id":1,"type":"Organization"},"html_url":"https://github.com/acme/app",` +
	`"default_branch":"main"},"sender":{"login":"octocat","id":1,"type":"User"},` +
	`"installation":{"id":2},"organization":{"login":"acme","id":1}}`)

// BenchmarkDrain drains a backlog of b.N queued deliveries through one agent
// to a local HTTP receiver: a fake cloud at the HTTP edge leases them in
// batches, the forward handler posts each to an httptest receiver, the
// ledger records each outcome durably, and the acks go back on the next
// heartbeats. It reports deliveries per second until the last one reached
// the receiver (forwarded/s) and until the cloud had every ack (acked/s).
// The last ack waits for the cloud's 1 s floor, as it does in production.
func BenchmarkDrain(b *testing.B) {
	for _, c := range []struct {
		name     string
		parallel bool
		workers  int
	}{
		{"parallel/workers=4", true, 4},
		{"parallel/workers=16", true, 16},
		{"ordered/workers=4", false, 4},
	} {
		b.Run(c.name, func(b *testing.B) { benchDrain(b, c.parallel, c.workers) })
	}
}

func benchDrain(b *testing.B, parallel bool, workers int) {
	bc := newBenchCloud(b, b.N, "github", benchBody)
	cloud := httptest.NewServer(bc)
	defer cloud.Close()

	var received atomic.Int64
	var lastAt atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
		if received.Add(1) == int64(b.N) {
			lastAt.Store(time.Now().UnixNano())
		}
	}))
	defer receiver.Close()

	l, err := ledger.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	fwd, err := handler.NewForward(handler.ForwardOptions{URL: receiver.URL + "/github", ConnectTimeout: 5 * time.Second, Timeout: 30 * time.Second, Retry4xx: true, MaxConns: workers})
	if err != nil {
		b.Fatal(err)
	}
	a := New(Options{
		Cloud:      cloudapi.New(cloud.URL, cloud.Client(), "bench"),
		HostID:     "h1",
		Credential: "cred",
		Ledger:     l,
		Sources:    map[string]Source{"github": {Enabled: true, Parallel: parallel, Routes: []Route{{Handler: fwd}}}},
		Interval:   30 * time.Second,
		Workers:    workers,
		// As `host run` logs by default: one line per processed webhook.
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	select {
	case <-bc.done:
	case err := <-runErr:
		b.Fatalf("agent stopped: %v", err)
	case <-time.After(10 * time.Minute):
		b.Fatalf("only %d of %d acked", bc.nAcked, b.N)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	cancel()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
	if got := received.Load(); got != int64(b.N) {
		b.Fatalf("receiver got %d requests for %d deliveries", got, b.N)
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	fwdSecs := time.Duration(lastAt.Load() - start.UnixNano()).Seconds()
	b.ReportMetric(float64(b.N)/fwdSecs, "forwarded/s")
	b.ReportMetric(float64(b.N)/bc.doneAt.Sub(start).Seconds(), "acked/s")
	b.ReportMetric(float64(bc.heartbeats), "heartbeats")
	// CPU time of the whole process (agent, ledger, fake cloud and
	// receiver) per delivery: what bounds the rate on a machine of n cores
	// at n/cpu-µs, whatever else runs on it while measuring.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	if len(bc.batches) > 0 {
		sum := 0
		for _, n := range bc.batches {
			sum += n
		}
		b.ReportMetric(float64(sum)/float64(len(bc.batches)), "batch")
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
