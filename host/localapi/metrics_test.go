package localapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestMetrics(t *testing.T) {
	srv, l := setup(t, fakeAgent{last: now.Add(-42 * time.Second)})
	seed(t, l)
	m := scrape(t, srv.URL)
	require.Contains(t, m, "relay_host_ledger_rows 6\n")
	require.Contains(t, m, "relay_host_outbox_depth 6\n", "each recorded outcome waits to be reported")
	require.Contains(t, m, `relay_host_backlog{state="queued"} 3`)
	require.Contains(t, m, `relay_host_backlog{state="running"} 2`)
	require.Contains(t, m, "relay_host_seconds_since_contact 42\n")

	api := New(l, fakeAgent{}, 30*time.Second, clockwork.NewFakeClockAt(now), slog.New(slog.DiscardHandler))
	api.ObserveHandler("github", "success", 30*time.Millisecond)
	api.ObserveHandler("github", "error", 2*time.Second)
	srv2 := httptest.NewServer(api)
	defer srv2.Close()
	m = scrape(t, srv2.URL)
	require.Contains(t, m, `relay_host_handler_duration_seconds_count{result="success",source="github"} 1`)
	require.Contains(t, m, `relay_host_handler_duration_seconds_sum{result="error",source="github"} 2`)
	require.Contains(t, m, "relay_host_seconds_since_contact 0\n", "never: since the start")
	var nilServer *Server
	nilServer.ObserveHandler("github", "success", time.Second) // before the API exists
}
