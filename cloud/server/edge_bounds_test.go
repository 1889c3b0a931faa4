package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
)

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines are the logged lines at level that contain msg.
func (l *logBuffer) lines(level, msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, "level="+level) && strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// newLoggedEdge is newEdge with the server's log kept, and the JWT key given.
func newLoggedEdge(t *testing.T, st store.Store, ring *secrets.Ring, clock *clockwork.FakeClock, cfg Config, key []byte) (*edgeBundle, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	return startEdge(t, st, ring, clock, cfg, key, logs), logs
}

func (b *edgeBundle) metric(series string) string {
	b.t.Helper()
	m := b.admin("GET", "/metrics", nil)
	require.Equal(b.t, 200, m.status)
	for _, line := range strings.Split(string(m.body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	return "0"
}

// junkHeaders is n header names a sender made up.
func junkHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("X-J%05d", i)] = "1"
	}
	return h
}

// 40,000 junk header names in a refused request are recorded as 64 names
// and a count, and listed so.
func TestRejectionsAuditIsBounded(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 100000})
	hostID, _ := b.newHost("h")
	h := junkHeaders(40_000)
	for k, v := range ghHeaders("wrong", "d-1", prBody) {
		h[k] = v
	}
	h["X-"+strings.Repeat("Long", 100)] = "1"
	a := b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h)
	require.Equal(t, 401, a.status, string(a.body))

	raw := b.admin("GET", "/api/hosts/"+hostID+"/rejections", nil)
	require.Equal(t, 200, raw.status)
	require.Less(t, len(raw.body), 5000, "one record lists under 5 KB")
	rs := b.rejections(hostID)
	require.Len(t, rs, 1)
	names := rs[0].HeaderNames
	require.Len(t, names, store.RejectionMaxHeaderNames+1)
	// Go's client adds Accept-Encoding, Content-Length and User-Agent.
	require.Equal(t, fmt.Sprintf("(%d more)", len(h)+3-store.RejectionMaxHeaderNames), names[64])
	require.Equal(t, "accept-encoding", names[0], "the first names in order")
	for _, n := range names {
		require.LessOrEqual(t, len(n), store.RejectionMaxNameBytes)
	}
}

// While the keys are wrong, one host's flood of unsigned posts goes into
// the quarantine at its rate and up to its share, is answered 503 past them,
// and logs one line; another host keeps its room.
func TestQuarantineIsRateLimitedAndShared(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	a, _ := good.newHost("a")
	other, _ := good.newHost("b")

	lost, logs := newLoggedEdge(t, st, ringOf(t, 9), clock, Config{
		QuarantineMax: 100, QuarantineHostMax: 4, QuarantinePerMin: 6, RateLimitPerMin: 100000,
	}, jwtKey)
	unsigned := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "forged"}
	post := func(hostID string) int {
		return lost.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), unsigned).status
	}
	for range 10 {
		require.Equal(t, 503, post(a))
	}
	held := func(hostID string) int {
		qs, err := st.QuarantineList(context.Background(), &store.QuarantineListParams{Limit: 500})
		require.NoError(t, err)
		n := 0
		for _, q := range qs {
			if q.HostID == hostID {
				n++
			}
		}
		return n
	}
	require.Equal(t, 4, held(a), "the host's share")
	require.Equal(t, "4", lost.metric(`relay_intake_requests_total{outcome="quarantined",provider="github"}`))
	require.Equal(t, "2", lost.metric(`relay_intake_requests_total{outcome="quarantine_full",provider="github"}`), "no room in the share")
	require.Equal(t, "4", lost.metric(`relay_intake_requests_total{outcome="quarantine_rate_limited",provider="github"}`), "6 a minute")

	// The other host has its own room and rate.
	require.Equal(t, 503, post(other))
	require.Equal(t, 1, held(other))

	// One error line per host, not one per request; no unsampled "request failed".
	require.Len(t, logs.lines("ERROR", ""), 2, logs.buf.String())
	require.Len(t, logs.lines("ERROR", "request quarantined"), 2)
	require.Empty(t, logs.lines("ERROR", "request failed"))

	// A minute later the rate has refilled, the share is still full.
	clock.Advance(time.Minute)
	require.Equal(t, 503, post(a))
	require.Equal(t, 4, held(a))
	require.Equal(t, "3", lost.metric(`relay_intake_requests_total{outcome="quarantine_full",provider="github"}`))
	require.Len(t, logs.lines("ERROR", "the host's share of the quarantine is full"), 1)
}

// A quarantined request's headers count against its host's bytes, and the
// operator's listing of them is cut like a rejection record.
func TestQuarantineHeadersCountedAndListedBounded(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	lost := newEdge(t, st, ringOf(t, 9), clock, Config{QuarantineHostMaxBytes: 1 << 20})
	h := junkHeaders(40_000) // ~550 KB of headers, a short body
	for k, v := range ghHeaders(testSecret, "d-1", prBody) {
		h[k] = v
	}
	require.Equal(t, 503, lost.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h).status)
	require.Equal(t, 503, lost.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h).status)
	n, err := st.QuarantineCount(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n, "two such requests pass the host's 1 MiB")

	a := lost.admin("GET", "/api/quarantine", nil)
	require.Equal(t, 200, a.status)
	require.Less(t, len(a.body), 5000)
	var ql struct {
		Requests []quarantinedJSON `json:"requests"`
	}
	a.json(t, &ql)
	require.Len(t, ql.Requests[0].HeaderNames, store.RejectionMaxHeaderNames+1)
}

// The share is in bytes too: a host's large requests use it up.
func TestQuarantineHostShareInBytes(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	lost := newEdge(t, st, ringOf(t, 9), clock, Config{QuarantineHostMaxBytes: 3000, RateLimitPerMin: 100000})
	body := bytes.Repeat([]byte("x"), 1000)
	for i := range 4 {
		a := lost.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(body), ghHeaders(testSecret, fmt.Sprint(i), body))
		require.Equal(t, 503, a.status)
	}
	n, err := st.QuarantineCount(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n, "1,000 bytes of body plus headers and URL each: two fit in 3,000")
	require.Equal(t, "2", lost.metric(`relay_intake_requests_total{outcome="quarantine_full",provider="github"}`))
}

// GitLab's token is the secret itself: while the source's secret cannot be
// decrypted, the quarantine keeps a keyed hash of it, never the token; once
// the key is back, the right token is admitted (without its header) and a
// wrong one rejected.
func TestQuarantineKeepsNoToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := sqlitetest.OpenAt(t, filepath.Join(dir, "cloud.db"))
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	const token = "gl-token-5f1c2a9e"
	good.addSource(hostID, "gitlab", map[string]any{"secrets": []string{token}})

	lost := newEdge(t, st, ringOf(t, 9), clock, Config{})
	send := func(b *edgeBundle, tok, uuid string) answer {
		body := []byte(`{"object_kind":"push","ref":"` + uuid + `"}`)
		return b.do("POST", "/api/webhooks/"+hostID+"/gitlab", bytes.NewReader(body),
			map[string]string{"X-Gitlab-Token": tok, "X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": uuid})
	}
	require.Equal(t, 503, send(lost, token, "u-right").status)
	require.Equal(t, 503, send(lost, "gl-token-wrong", "u-wrong").status)

	qs, err := st.QuarantineList(ctx, &store.QuarantineListParams{})
	require.NoError(t, err)
	require.Len(t, qs, 2)
	for _, q := range qs {
		require.NotContains(t, q.Header, "X-Gitlab-Token", "the token header is not kept")
		require.Len(t, q.TokenMACs["X-Gitlab-Token"], 32, "its keyed hash is")
		row, err := json.Marshal(q)
		require.NoError(t, err)
		require.NotContains(t, string(row), "gl-token-")
	}
	require.NotEqual(t, qs[0].TokenMACs, qs[1].TokenMACs)
	// Nor anywhere in the database's files.
	files, err := filepath.Glob(filepath.Join(dir, "cloud.db*"))
	require.NoError(t, err)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "gl-token-", f)
	}

	back := newEdge(t, st, ringOf(t, 1), clock, Config{})
	res, err := back.srv.ReleaseQuarantine(ctx)
	require.NoError(t, err)
	require.Equal(t, intake.ReleaseResult{Admitted: 1, Rejected: 1}, res)

	ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{HostID: hostID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	d, err := st.DeliveryGet(ctx, hostID, ds[0].ID)
	require.NoError(t, err)
	require.Equal(t, "u-right", d.EventID)
	require.Equal(t, "Push Hook", d.Headers["x-gitlab-event"])
	require.NotContains(t, d.Headers, "x-gitlab-token", "admitted without the token")
	rs := back.rejections(hostID)
	require.Len(t, rs, 1)
	require.Equal(t, 401, rs[0].Status)
	require.Contains(t, rs[0].Reason, "token: no secret matches")
}

// Hashes taken under another JWT key (the key changed while requests were
// held) match no secret: the request is rejected, never admitted unchecked.
func TestQuarantinedTokenUnderAnotherJWTKey(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clock := newClock()
	good := newEdge(t, st, ringOf(t, 1), clock, Config{})
	hostID, _ := good.newHost("h")
	good.addSource(hostID, "gitlab", map[string]any{"secrets": []string{"gl-token"}})
	lost := newEdge(t, st, ringOf(t, 9), clock, Config{})
	body := []byte(`{"object_kind":"push"}`)
	a := lost.do("POST", "/api/webhooks/"+hostID+"/gitlab", bytes.NewReader(body),
		map[string]string{"X-Gitlab-Token": "gl-token", "X-Gitlab-Event-UUID": "u-1"})
	require.Equal(t, 503, a.status)

	back, _ := newLoggedEdge(t, st, ringOf(t, 1), clock, Config{}, []byte("another-jwt-key-32-bytes-long!!!"))
	res, err := back.srv.ReleaseQuarantine(ctx)
	require.NoError(t, err)
	require.Equal(t, intake.ReleaseResult{Rejected: 1}, res)
	require.Zero(t, back.count(hostID))
}

// Headers the request's Connection header names are hop-by-hop, as is
// Expect: neither reaches the host.
func TestHopByHopHeadersAreDropped(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	h := ghHeaders(testSecret, "d-1", prBody)
	h["Connection"] = "X-Hop-One, keep-alive"
	h["X-Hop-One"] = "1"
	h["X-GitHub-Hook-ID"] = "2"
	h["Expect"] = "100-continue"
	a := b.do("POST", "/api/webhooks/"+hostID+"/github", bytes.NewReader(prBody), h)
	require.Equal(t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(t, &r)
	d, err := b.store.DeliveryGet(context.Background(), hostID, r.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, "2", d.Headers["x-github-hook-id"])
	require.NotContains(t, d.Headers, "x-hop-one")
	require.NotContains(t, d.Headers, "expect")
	require.NotContains(t, d.Headers, "connection")
}

// A webhook filtered out through an entry that matches nothing (an older
// cloud stored "pull_request.*") is logged, at most as often as the
// host's other sampled warnings, naming the entries; one the filter drops
// by a valid entry is not.
func TestFilteredByADeadEntryIsLogged(t *testing.T) {
	st := openStore(t)
	clock := newClock()
	b, logs := newLoggedEdge(t, st, ringOf(t, 1), clock, Config{RateLimitPerMin: 100000}, jwtKey)
	hostID, _ := b.newHost("h")
	const msg = "webhook filtered out by a source whose event filter has entries that match no webhook"
	require.Equal(t, 200, b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"events": []string{"push"}}).status)
	require.Equal(t, 200, b.sendGitHub(hostID, "d-valid", prBody).status)
	require.Empty(t, logs.lines("WARN", msg), "a filter of valid entries drops without a word")

	src, err := st.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	_, err = st.SourceUpsert(context.Background(), &store.SourceUpsertParams{HostID: hostID, Name: src.Name, Provider: src.Provider,
		Enabled: true, Events: []string{"pull_request.*", "push"}, Secrets: src.Secrets, Options: src.Options, Now: clock.Now()})
	require.NoError(t, err)
	clock.Advance(intake.TargetTTL + time.Second) // written behind the server's back: its cache lets go of the source
	for i := range 20 {
		a := b.sendGitHub(hostID, fmt.Sprintf("d-dead-%d", i), prBody)
		require.Equal(t, 200, a.status)
		var r shared.IntakeResponse
		a.json(t, &r)
		require.Equal(t, shared.IntakeFiltered, r.Status)
	}
	lines := logs.lines("WARN", msg)
	require.NotEmpty(t, lines)
	require.Less(t, len(lines), 20, "sampled")
	require.Contains(t, lines[0], "entries=[pull_request.*]")
	require.Contains(t, lines[0], "event_type=pull_request event_action=opened")
	require.Contains(t, lines[0], "host="+hostID)
}
