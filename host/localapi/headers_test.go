package localapi

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryAnswerIsNosniffAndSameOrigin: every answer of the local API —
// JSON, its errors (400, 404, 421), /metrics — carries
// X-Content-Type-Options: nosniff and Cross-Origin-Resource-Policy:
// same-origin, as its pages do, so another site's page cannot pull it in
// as a script or an image.
func TestEveryAnswerIsNosniffAndSameOrigin(t *testing.T) {
	t.Parallel()
	srv, l := setup(t, fakeAgent{})
	seed(t, l)

	for _, tc := range []struct {
		path, host string
		status     int
	}{
		{"/webhooks/ledger", "", http.StatusOK},
		{"/webhooks/ledger?limit=0", "", http.StatusBadRequest},
		{"/webhooks/ledger/github:d0:1", "", http.StatusOK},
		{"/webhooks/ledger/github:nope:1", "", http.StatusNotFound},
		{"/healthz", "", http.StatusOK},
		{"/metrics", "", http.StatusOK},
		{"/no-such-endpoint", "", http.StatusNotFound},
		{"/webhooks/ledger", "rebind.attacker.example:7071", http.StatusMisdirectedRequest},
	} {
		req, err := http.NewRequest("GET", srv.URL+tc.path, nil)
		require.NoError(t, err)
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, tc.path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%s (Host %q)", tc.path, tc.host)
		require.Equal(t, "same-origin", resp.Header.Get("Cross-Origin-Resource-Policy"), "%s (Host %q)", tc.path, tc.host)
	}
}
