package ctl

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlainHTTPToAnotherMachine: the admin token goes over plain http only
// to this machine, unless --insecure-http accepts another, with a warning;
// the URL is checked before anything is sent.
func TestPlainHTTPToAnotherMachine(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"hosts": []}`)
	}))
	t.Cleanup(srv.Close)
	ctlWith := func(ctx context.Context, relayURL string, args ...string) (int, string) {
		var out, errs bytes.Buffer
		getenv := func(k string) string {
			switch k {
			case EnvToken:
				return "admin-s3cret"
			case EnvURL:
				return relayURL
			}
			return ""
		}
		code := Run(ctx, args, strings.NewReader(""), &out, &errs, getenv)
		return code, errs.String()
	}
	// A context already canceled: a command that got as far as the network
	// would end there, before a connection to anything.
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	for _, tc := range []struct {
		relayURL string
		args     []string
		want     string
	}{
		{"", []string{"--url", "http://192.0.2.1:8080", "hosts", "list"}, "cloud ctl: --url=http://192.0.2.1:8080: plain http to another machine sends the admin token in clear; use https, or --insecure-http to accept that"},
		{"", []string{"hosts", "list", "--url=http://relay.example.com"}, "--url=http://relay.example.com: plain http"},
		{"http://admin:pw@relay.example.com", []string{"hosts", "list"}, "cloud ctl: $RELAY_URL=http://admin:xxxxx@relay.example.com: plain http"},
		{"", []string{"--url", "http://127.0.0.1.nip.io", "hosts", "list"}, "plain http to another machine"},
		{"", []string{"--url", "ftp://relay.example.com", "hosts", "list"}, `cloud ctl: --url="ftp://relay.example.com": want http://… or https://…`},
		{"", []string{"--url", "http://", "hosts", "list"}, `want http://… or https://…`},
	} {
		code, errOut := ctlWith(canceled, tc.relayURL, tc.args...)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, tc.args)
		require.NotContains(t, errOut, "pw@", tc.args)
	}

	// Accepted with --insecure-http, wherever it is given, and said.
	for _, args := range [][]string{
		{"--insecure-http", "--url", "http://192.0.2.1:8080", "hosts", "list"},
		{"hosts", "list", "--url", "http://192.0.2.1:8080", "--insecure-http"},
	} {
		code, errOut := ctlWith(canceled, "", args...)
		require.Equal(t, ExitFailed, code, "%q: %s", args, errOut)
		require.Contains(t, errOut, "cloud ctl: warning: --insecure-http: the admin token travels to http://192.0.2.1:8080 in clear", args)
	}

	// This machine over plain http, and https anywhere, need nothing.
	for _, u := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		code, errOut := ctlWith(context.Background(), u, "hosts", "list")
		require.Equal(t, ExitOK, code, "%s: %s", u, errOut)
		require.Empty(t, errOut, u)
	}
	require.Equal(t, int32(2), hits.Load())
	for _, u := range []string{"http://[::1]:8080", "http://LOCALHOST:8080", "http://127.0.0.2:8080", "https://relay.example.com"} {
		warning, err := checkURL("--url", u, false)
		require.NoError(t, err, u)
		require.Empty(t, warning, u)
	}
}
