package localapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// TestAnswersOnlyLoopbackNames: a page that rebinds a name of its own to
// 127.0.0.1 sends that name as Host and gets 421, not the ledger; requests
// to 127.0.0.1, localhost or [::1] (any port) are answered.
func TestAnswersOnlyLoopbackNames(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, fakeAgent{})
	seed(t, l)

	for _, host := range []string{
		"rebind.attacker.example", "rebind.attacker.example:7071", "127.0.0.1.nip.io:7071", "localhost.attacker.example",
		"attacker.example:7071@127.0.0.1", "192.168.1.5:7071", "0.0.0.0:7071", "2130706433", "",
	} {
		req, err := http.NewRequest("GET", srv.URL+"/webhooks/ledger", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if host == "" {
			// The client sends the URL's host when Host is empty; test the
			// handler alone for a request without one.
			require.NoError(t, err)
			resp.Body.Close()
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/webhooks/ledger", nil)
			r.Host = ""
			srv.Config.Handler.ServeHTTP(rec, r)
			require.Equal(t, http.StatusMisdirectedRequest, rec.Code)
			continue
		}
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, host)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var er shared.ErrorResponse
		require.NoError(t, json.Unmarshal(body, &er), string(body))
		require.Equal(t, "misdirected", er.Error.Code)
		require.NotContains(t, string(body), "github:d0:1", "nothing of the ledger")
	}

	for _, host := range []string{"127.0.0.1", "127.0.0.1:7071", "localhost", "LOCALHOST:7071", "[::1]", "[::1]:7071", "127.0.0.2:7071"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/webhooks/ledger", nil)
		r.Host = host
		srv.Config.Handler.ServeHTTP(rec, r)
		require.Equal(t, http.StatusOK, rec.Code, host)
		require.Contains(t, rec.Body.String(), "github:d0:1", host)
	}
}

// TestAllowListenHost: an API listening on an explicit address also answers
// requests to that address; a name or the unspecified address adds nothing.
func TestAllowListenHost(t *testing.T) {
	t.Parallel()
	_, l := setup(t, fakeAgent{})
	status := func(listen, host string) int {
		s := New(l, fakeAgent{}, 30*time.Second, clockwork.NewFakeClockAt(now), slog.New(slog.DiscardHandler))
		s.AllowListenHost(listen)
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.Host = host
		s.ServeHTTP(rec, r)
		return rec.Code
	}
	require.Equal(t, http.StatusOK, status("192.168.1.5:7071", "192.168.1.5:7071"))
	require.Equal(t, http.StatusOK, status("[fd00::5]:7071", "[fd00::5]:7071"))
	require.Equal(t, http.StatusOK, status("192.168.1.5:7071", "localhost:7071"))
	require.Equal(t, http.StatusMisdirectedRequest, status("192.168.1.5:7071", "192.168.1.6:7071"))
	require.Equal(t, http.StatusMisdirectedRequest, status("0.0.0.0:7071", "0.0.0.0:7071"))
	require.Equal(t, http.StatusMisdirectedRequest, status("[::]:7071", "[::]:7071"))
	require.Equal(t, http.StatusMisdirectedRequest, status("myhost.lan:7071", "myhost.lan:7071"))
}
