package main

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

// TestSettingChecksTable: every check in settingChecks is of a setting a
// command registers, under the variable its flag names.
func TestSettingChecksTable(t *testing.T) {
	envOf := map[string]string{}
	for cmd := range commands {
		var o options
		o.flagSet(cmd).VisitAll(func(f *flag.Flag) { envOf[f.Name] = settingEnv(t, f) })
	}
	seen := map[string]bool{}
	for _, c := range settingChecks {
		require.False(t, seen[c.flag], "-%s: one entry per setting", c.flag)
		seen[c.flag] = true
		require.Contains(t, envOf, c.flag, "-%s: no command registers it", c.flag)
		require.Equal(t, envOf[c.flag], c.env, "-%s", c.flag)
		require.True(t, c.want != nil || c.with != nil, "-%s: checks nothing", c.flag)
	}
}

// TestSettingsTogether: settings that are good alone but not together
// stop serve with exit code 2, naming the variable; every check of a
// setting with the others (settingChecks' with) has a case here.
func TestSettingsTogether(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := hermetic(t)
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, "relay.example.com").Write(t, dir)
	other := t.TempDir()
	_, otherKey := ca.Issue(t, "relay.example.com").Write(t, other)

	cases := map[string]struct {
		check string // the flag whose check refuses
		env   map[string]string
		want  string
	}{
		"cert without key":    {"tls-cert", map[string]string{"RELAY_TLS_CERT": certFile}, "RELAY_TLS_CERT and RELAY_TLS_KEY: want both"},
		"key without cert":    {"tls-cert", map[string]string{"RELAY_TLS_KEY": keyFile}, "RELAY_TLS_CERT and RELAY_TLS_KEY: want both"},
		"key of another cert": {"tls-key", map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": otherKey}, "RELAY_TLS_KEY: want the private key of RELAY_TLS_CERT"},
		"files and ACME": {"acme-domains", map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": keyFile, "RELAY_ACME_DOMAINS": "relay.example.com"},
			"RELAY_ACME_DOMAINS: want either"},
		"redirect without TLS": {"http-redirect-listen", map[string]string{"RELAY_HTTP_REDIRECT_LISTEN": "127.0.0.1:0"}, "RELAY_HTTP_REDIRECT_LISTEN: want HTTPS on"},
		"redirect on the HTTPS address": {"http-redirect-listen", map[string]string{"RELAY_TLS_CERT": certFile, "RELAY_TLS_KEY": keyFile,
			"RELAY_LISTEN": "127.0.0.1:8443", "RELAY_HTTP_REDIRECT_LISTEN": "127.0.0.1:8443"}, "RELAY_HTTP_REDIRECT_LISTEN: want another address"},
		"a host's share over the quarantine": {"quarantine-host-max", map[string]string{"RELAY_QUARANTINE_MAX": "100", "RELAY_QUARANTINE_HOST_MAX": "101"},
			"RELAY_QUARANTINE_HOST_MAX=101: a host's share cannot be more than RELAY_QUARANTINE_MAX=100"},
		"a host's MiB over the quarantine's": {"quarantine-host-max-mb", map[string]string{"RELAY_QUARANTINE_MAX_MB": "64", "RELAY_QUARANTINE_HOST_MAX_MB": "65"},
			"RELAY_QUARANTINE_HOST_MAX_MB=65: a host's share cannot be more than RELAY_QUARANTINE_MAX_MB=64"},
	}
	covered := map[string]bool{}
	for name, c := range cases {
		covered[c.check] = true
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
	for _, c := range settingChecks {
		if c.with != nil {
			require.True(t, covered[c.flag], "-%s: its check with the other settings has no case", c.flag)
		}
	}
}
