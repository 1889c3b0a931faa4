package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

type fakeAgent struct {
	last         time.Time
	lastErr      string
	unrecordable bool
	skew         *time.Duration
	status       agent.Status
}

func (a fakeAgent) Status() agent.Status { return a.status }

func (a fakeAgent) LastHeartbeat() time.Time       { return a.last }
func (a fakeAgent) LastHeartbeatError() string     { return a.lastErr }
func (a fakeAgent) Backlog() (queued, running int) { return 3, 2 }
func (a fakeAgent) Stopping() bool                 { return false }
func (a fakeAgent) Unrecordable() bool             { return a.unrecordable }
func (a fakeAgent) ClockSkew() (time.Duration, bool) {
	if a.skew == nil {
		return 0, false
	}
	return *a.skew, true
}

var now = time.Date(2026, 2, 16, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T, agent fakeAgent) (*httptest.Server, *ledger.Ledger) {
	t.Helper()
	l, err := ledger.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	srv := httptest.NewServer(New(l, agent, 30*time.Second, clockwork.NewFakeClockAt(now), slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return srv, l
}

func get(t *testing.T, srv *httptest.Server, path string, out any) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(body, out), string(body))
	return resp.StatusCode
}

func seed(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	// d0 … d5, processed 0 … 5 hours ago; odd ones failed, from stripe.
	for i := range 6 {
		e := ledger.Entry{DeliveryID: fmt.Sprintf("github:d%d:1", i), Source: "github", EventType: "push",
			Result: ledger.ResultSuccess, ProcessedAt: now.Add(-time.Duration(i) * time.Hour)}
		if i%2 == 1 {
			e.Source, e.Result, e.Error = "stripe", ledger.ResultError, "HTTP 500"
		}
		_, err := l.DeliveryRecord(context.Background(), ledger.RecordParams{Entry: e, Retryable: true})
		require.NoError(t, err)
	}
}

func ids(r listResponse) []string {
	var out []string
	for _, e := range r.Entries {
		out = append(out, e.DeliveryID)
	}
	return out
}

func TestLedgerList(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, fakeAgent{})

	var r listResponse
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger", &r))
	require.NotNil(t, r.Entries)
	require.Empty(t, r.Entries)

	seed(t, l)
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger", &r))
	require.Len(t, r.Entries, 6)
	require.Empty(t, r.NextCursor)
	require.Equal(t, "github:d0:1", r.Entries[0].DeliveryID)

	r = listResponse{}
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger?result=error", &r))
	require.Equal(t, []string{"github:d1:1", "github:d3:1", "github:d5:1"}, ids(r))

	r = listResponse{}
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger?source=github&since=2h30m", &r))
	require.Equal(t, []string{"github:d0:1", "github:d2:1"}, ids(r))

	r = listResponse{}
	since := url.QueryEscape(now.Add(-3 * time.Hour).Format(time.RFC3339))
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger?since="+since, &r))
	require.Len(t, r.Entries, 4)

	var pages []string
	cursor := ""
	for {
		r = listResponse{}
		require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger?limit=4&cursor="+cursor, &r))
		pages = append(pages, ids(r)...)
		if r.NextCursor == "" {
			break
		}
		cursor = url.QueryEscape(r.NextCursor)
	}
	require.Len(t, pages, 6)
	require.Equal(t, "github:d5:1", pages[5])
}

func TestLedgerListBadParams(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t, fakeAgent{})
	for _, tc := range []struct{ query, want string }{
		{"result=done", `invalid result "done"`},
		{"limit=0", `invalid limit "0"`},
		{"limit=501", `invalid limit "501"`},
		{"limit=ten", `invalid limit "ten"`},
		{"since=yesterday", `invalid since "yesterday"`},
		{"since=-1h", `invalid since "-1h"`},
		{"cursor=garbage", "invalid cursor"},
		{"sort=asc", `unknown query parameter "sort"`},
	} {
		var er shared.ErrorResponse
		require.Equal(t, http.StatusBadRequest, get(t, srv, "/webhooks/ledger?"+tc.query, &er), tc.query)
		require.Equal(t, shared.CodeInvalid, er.Error.Code)
		require.Contains(t, er.Error.Message, tc.want)
	}
}

func TestLedgerGet(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, fakeAgent{})
	seed(t, l)

	var e ledger.Entry
	require.Equal(t, http.StatusOK, get(t, srv, "/webhooks/ledger/github:d1:1", &e))
	require.Equal(t, "github:d1:1", e.DeliveryID)
	require.Equal(t, ledger.ResultError, e.Result)
	require.Equal(t, "HTTP 500", e.Error)
	require.Equal(t, 1, e.Attempts)
	require.True(t, e.ProcessedAt.Equal(now.Add(-time.Hour)))

	var er shared.ErrorResponse
	require.Equal(t, http.StatusNotFound, get(t, srv, "/webhooks/ledger/github:nope:1", &er))
	require.Equal(t, shared.CodeNotFound, er.Error.Code)
	require.Contains(t, er.Error.Message, `"github:nope:1"`)

	er = shared.ErrorResponse{}
	require.Equal(t, http.StatusNotFound, get(t, srv, "/nowhere", &er))
	require.Equal(t, shared.CodeNotFound, er.Error.Code)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, fakeAgent{})
	var h map[string]any
	require.Equal(t, http.StatusOK, get(t, srv, "/healthz", &h))
	require.Equal(t, "ok", h["status"], "just started: not degraded yet")
	require.Nil(t, h["last_heartbeat_at"])
	require.EqualValues(t, 0, h["outbox"])
	require.EqualValues(t, 3, h["queued"])
	require.EqualValues(t, 2, h["running"])

	seed(t, l)
	clock := clockwork.NewFakeClockAt(now)
	srv2 := httptest.NewServer(New(l, fakeAgent{last: now}, 30*time.Second, clock, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv2.Close)
	h = nil
	require.Equal(t, http.StatusOK, get(t, srv2, "/healthz", &h))
	require.Equal(t, "ok", h["status"])
	require.Equal(t, "2026-02-16T12:00:00Z", h["last_heartbeat_at"])
	require.EqualValues(t, 6, h["outbox"])
	require.Nil(t, h["last_heartbeat_error"])

	// Three intervals without a heartbeat: degraded, with the reason.
	clock.Advance(91 * time.Second)
	srv3 := httptest.NewServer(New(l, fakeAgent{last: now, lastErr: "heartbeat: connection refused"}, 30*time.Second, clock, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv3.Close)
	h = nil
	require.Equal(t, http.StatusOK, get(t, srv3, "/healthz", &h))
	require.Equal(t, "degraded", h["status"])
	require.Equal(t, "heartbeat: connection refused", h["last_heartbeat_error"])
	require.Nil(t, h["ledger_unwritable"])

	// Heartbeats fine, but the ledger cannot record: degraded too.
	srv4 := httptest.NewServer(New(l, fakeAgent{last: clock.Now(), unrecordable: true}, 30*time.Second, clock, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv4.Close)
	h = nil
	require.Equal(t, http.StatusOK, get(t, srv4, "/healthz", &h))
	require.Equal(t, "degraded", h["status"])
	require.Equal(t, true, h["ledger_unwritable"])
}

// TestHealthSaysWhoseClock: the health report gives this host's time and,
// once the cloud said its own, the cloud's and the skew between them.
func TestHealthSaysWhoseClock(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t, fakeAgent{})
	var h struct {
		Clock map[string]any `json:"clock"`
	}
	require.Equal(t, http.StatusOK, get(t, srv, "/healthz", &h))
	require.Equal(t, map[string]any{"host_now": "2026-02-16T12:00:00Z"}, h.Clock, "the cloud's time not known yet")

	ahead := time.Hour + 30*time.Second // this host's clock is ahead of the cloud's
	srv2, _ := setup(t, fakeAgent{skew: &ahead})
	h.Clock = nil
	require.Equal(t, http.StatusOK, get(t, srv2, "/healthz", &h))
	require.Equal(t, map[string]any{"host_now": "2026-02-16T12:00:00Z", "cloud_now": "2026-02-16T10:59:30Z", "skew_s": float64(3630)}, h.Clock)
}
