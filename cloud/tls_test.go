package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

// TestTLSSettingsTogether: TLS settings that are good alone but not
// together stop serve with exit code 2, naming the variable.
func TestTLSSettingsTogether(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := hermetic(t)
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, "relay.example.com").Write(t, dir)
	other := t.TempDir()
	_, otherKey := ca.Issue(t, "relay.example.com").Write(t, other)

	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"cert without key":    {map[string]string{"RELAY_TLS_CERT": certFile}, "RELAY_TLS_CERT and RELAY_TLS_KEY: want both"},
		"key without cert":    {map[string]string{"RELAY_TLS_KEY": keyFile}, "RELAY_TLS_CERT and RELAY_TLS_KEY: want both"},
		"key of another cert": {map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": otherKey}, "RELAY_TLS_KEY: want the private key of RELAY_TLS_CERT"},
		"files and ACME": {map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": keyFile, "RELAY_ACME_DOMAINS": "relay.example.com"},
			"RELAY_ACME_DOMAINS: want either"},
		"redirect without TLS": {map[string]string{"RELAY_HTTP_REDIRECT_LISTEN": "127.0.0.1:0"}, "RELAY_HTTP_REDIRECT_LISTEN: want HTTPS on"},
		"redirect on the HTTPS address": {map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": keyFile,
			"RELAY_LISTEN": "127.0.0.1:8443", "RELAY_HTTP_REDIRECT_LISTEN": "127.0.0.1:8443"}, "RELAY_HTTP_REDIRECT_LISTEN: want another address"},
	} {
		t.Run(name, func(t *testing.T) {
			hermetic(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			require.Equal(t, 2, run(ctx, []string{"serve"}, &stderr), stderr.String())
			require.Contains(t, stderr.String(), c.want)
		})
	}
}

func TestACMEDomains(t *testing.T) {
	got, err := acmeDomains(" Relay.Example.com ,www.example.com,")
	require.NoError(t, err)
	require.Equal(t, []string{"relay.example.com", "www.example.com"}, got)
	for _, bad := range []string{"localhost", "::1", "127.0.0.1", "*.example.com", "-a.example.com", "a..example.com", "a_b.example.com", ","} {
		_, err := acmeDomains(bad)
		require.Error(t, err, bad)
	}
}
