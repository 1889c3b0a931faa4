package server

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// TestSinkAddressRefused: a sink whose URL names a loopback, link-local or
// private address is refused when it is added, 400 saying why, unless
// RELAY_ALERT_SINK_ALLOW lists it. Nothing is sent: sinks are only
// stored here.
func TestSinkAddressRefused(t *testing.T) {
	b := setup(t)
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:8080/", "http://[::1]/",
		"http://10.0.0.5/", "http://[::ffff:192.168.0.1]/", "http://127.1/"} {
		a := b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": u}, 400, shared.CodeInvalid)
		var e shared.ErrorResponse
		a.json(t, &e)
		require.Contains(t, e.Error.Message, "alert sink address refused", u)
	}
	a := b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "slack", "url": "https://169.254.169.254/services/T/B/x"}, 400, shared.CodeInvalid)
	var e shared.ErrorResponse
	a.json(t, &e)
	require.Equal(t, "alert sink address refused: 169.254.169.254 is link-local (RELAY_ALERT_SINK_ALLOW lists the networks sinks may reach)", e.Error.Message)

	// Allowed: the operator's networks, and only those.
	b.server.cfg.AlertSinkAllow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	require.Equal(t, 201, b.admin("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "http://10.0.0.5/"}).status)
	b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "http://10.0.1.5/"}, 400, shared.CodeInvalid)
	b.refused("POST", "/api/alerts/sinks", map[string]string{"kind": "webhook", "url": "http://127.0.0.1/"}, 400, shared.CodeInvalid)
}
