package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// heldPost is a webhook in flight: its headers are sent, its body only
// when the test says.
type heldPost struct {
	t    *testing.T
	pw   *io.PipeWriter
	body []byte
	done chan answer
}

// post starts a GitHub webhook from the client address ip (the test's
// server trusts X-Forwarded-For from loopback). A chunked one declares no
// length.
func (b *edgeBundle) post(hostID, ip string, body []byte, chunked bool) *heldPost {
	b.t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", b.bundle.srv.URL+"/api/webhooks/"+hostID+"/github", pr)
	require.NoError(b.t, err)
	if !chunked {
		req.ContentLength = int64(len(body))
	}
	for k, v := range ghHeaders(testSecret, "d-"+strconv.Itoa(len(body))+"-"+ip+"-"+hostID, body) {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Forwarded-For", ip)
	h := &heldPost{t: b.t, pw: pw, body: body, done: make(chan answer, 1)}
	b.t.Cleanup(func() {
		// Before the server closes, which waits for its requests: a failed
		// test may leave one waiting for its bytes (fake time).
		cancel()
		pw.Close()
		b.clock.Advance(b.srv.cfg.BodyBudgetWait)
	})
	go func() {
		resp, err := b.bundle.srv.Client().Do(req)
		if err != nil {
			h.done <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		h.done <- answer{status: resp.StatusCode, header: resp.Header, body: rb}
	}()
	return h
}

// send writes the next n bytes of the body.
func (h *heldPost) send(n int) {
	_, err := h.pw.Write(h.body[:n])
	require.NoError(h.t, err)
	h.body = h.body[n:]
}

// finish writes the rest of the body and returns the answer.
func (h *heldPost) finish() answer {
	go func() {
		_, _ = h.pw.Write(h.body)
		h.pw.Close()
	}()
	return h.answer()
}

func (h *heldPost) answer() answer {
	select {
	case a := <-h.done:
		return a
	case <-time.After(10 * time.Second):
		h.t.Fatal("no answer")
		return answer{}
	}
}

// paddedBody is a pull_request payload of exactly n bytes.
func paddedBody(n int) []byte {
	head := `{"action":"opened","number":7,"pad":"`
	return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
}

// waitInUse waits until the budget holds want bytes (requests reserve as
// the server reads their headers, out of the test's sight).
func (b *edgeBundle) waitInUse(want int64) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { got, _, _ := b.srv.bodies.InUse(); return got == want },
		10*time.Second, time.Millisecond, "bytes in flight")
}

// refusedOverBudget lets a request's bounded wait run out (fake time) and
// checks its answer: 503 with Retry-After.
func (b *edgeBundle) refusedOverBudget(waiting int, hs ...*heldPost) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(b.t, b.clock.BlockUntilContext(ctx, waiting), "requests waiting for their bytes")
	b.clock.Advance(b.srv.cfg.BodyBudgetWait)
	for _, h := range hs {
		a := h.answer()
		require.Equal(b.t, 503, a.status, string(a.body))
		require.Equal(b.t, shared.CodeUnavailable, a.errCode(b.t))
		require.Equal(b.t, "5", a.header.Get("Retry-After"))
	}
}

const budgetUnit = 64 << 10

func budgetEdge(t *testing.T) *edgeBundle {
	return newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{
		RateLimitPerMin: 100_000, TrustedProxies: []string{"127.0.0.1"},
		InflightBytes: 3 * budgetUnit, InflightHostBytes: 2 * budgetUnit, InflightIPBytes: budgetUnit,
	})
}

// Request bodies in flight are bounded in all, per host and per client
// address: past a share a request waits briefly, then gets 503 with
// Retry-After, and everything is given back when the requests end.
func TestBodyBudget(t *testing.T) {
	b := budgetEdge(t)
	hostA, _ := b.newHost("a")
	hostB, _ := b.newHost("b")
	body := paddedBody(budgetUnit)

	// One address's flood at host A: the address's share is one body.
	x1 := b.post(hostA, "192.0.2.1", body, false)
	b.waitInUse(budgetUnit)
	x2 := b.post(hostA, "192.0.2.1", body, false)
	b.refusedOverBudget(1, x2)
	// Host A's real provider sends from elsewhere and is not starved.
	p := b.post(hostA, "198.51.100.7", body, false)
	require.Equal(t, 200, p.finish().status)

	// Two addresses fill host A's share; a third must wait, and is
	// refused, while host B still has its share of the rest.
	y := b.post(hostA, "192.0.2.2", body, false)
	b.waitInUse(2 * budgetUnit)
	z := b.post(hostA, "192.0.2.3", body, false)
	b.refusedOverBudget(1, z)
	zb := b.post(hostB, "192.0.2.3", body, false)
	b.waitInUse(3 * budgetUnit)
	// Now the whole budget is held: even host B's other sender waits.
	w := b.post(hostB, "192.0.2.4", body, false)
	b.refusedOverBudget(1, w)

	// A waiting request goes on as soon as bytes are given back.
	v := b.post(hostB, "192.0.2.5", body, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	require.Equal(t, 200, zb.finish().status)
	require.Equal(t, 200, v.finish().status, "no fake time passed: v got zb's bytes")

	require.Equal(t, 200, x1.finish().status)
	require.Equal(t, 200, y.finish().status)
	b.waitInUse(0)
	_, hosts, ips := b.srv.bodies.InUse()
	require.Zero(t, hosts)
	require.Zero(t, ips)

	m := b.admin("GET", "/metrics", nil)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="over_budget",provider="github"} 3`)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="queued",provider="github"} 5`)
	require.Contains(t, string(m.body), "\nrelay_intake_body_bytes_in_flight 0\n")
	rs := b.rejections(hostA)
	require.Len(t, rs, 2)
	require.Equal(t, 503, rs[0].Status)
	require.Contains(t, rs[0].Reason, "per host")
	require.Contains(t, rs[1].Reason, "per client address")
	require.Contains(t, b.rejections(hostB)[0].Reason, "in all")
}

// A body of unknown length (chunked) is reserved as it is read: the bound
// holds for it too.
func TestBodyBudgetChunked(t *testing.T) {
	b := budgetEdge(t)
	hostID, _ := b.newHost("a")
	body := paddedBody(budgetUnit * 3 / 4)

	c1 := b.post(hostID, "192.0.2.1", body, true)
	c1.send(budgetUnit / 2)
	b.waitInUse(budgetUnit) // its buffer, grown to hold what came
	c2 := b.post(hostID, "192.0.2.1", body, true)
	c2.send(100)
	b.refusedOverBudget(1, c2)
	require.Equal(t, 200, c1.finish().status)
	b.waitInUse(0)

	// Alone, a body larger than a share is taken (a source's limit may be
	// larger than the budget).
	big := paddedBody(3 * budgetUnit)
	require.Equal(t, 200, b.post(hostID, "192.0.2.1", big, true).finish().status)
	require.Equal(t, 200, b.post(hostID, "192.0.2.1", big, false).finish().status)
	b.waitInUse(0)
}
