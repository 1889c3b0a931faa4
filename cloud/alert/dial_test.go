package alert_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/store"
)

// sinkEnv is an evaluator whose secret_keys rule fires at its first tick,
// with allow as RELAY_ALERT_SINK_ALLOW; sinks are added with addSink.
type sinkEnv struct {
	env
}

func newSinkEnv(t *testing.T, allow []netip.Prefix) *sinkEnv {
	e := &sinkEnv{env{st: openSQLite(t), ring: newRing(t), clock: clockwork.NewFakeClockAt(base)}}
	cfg := evalConfig(alert.Config{KeysOK: func(context.Context) (bool, error) { return false, nil }})
	cfg.SinkAllow = allow
	e.eval = alert.New(e.st, e.ring, cfg, e.clock, slog.New(slog.DiscardHandler))
	return e
}

// addSink stores a webhook sink to rawURL as added with allow.
func (e *sinkEnv) addSink(t *testing.T, rawURL string, allow []netip.Prefix) {
	sink, _, err := alert.NewSink(e.ring, alert.SinkWebhook, rawURL, allow, base)
	require.NoError(t, err)
	require.NoError(t, e.st.AlertSinkCreate(context.Background(), sink))
}

func (e *sinkEnv) sinks(t *testing.T) []*store.AlertSink {
	sinks, err := e.st.AlertSinkList(context.Background())
	require.NoError(t, err)
	return sinks
}

// TestSinkRefusedAtDial: without RELAY_ALERT_SINK_ALLOW, a sink whose name
// resolves to loopback (as a name rebound after the sink was added may),
// or whose loopback address was allowed when it was added and no longer
// is, is refused when the connection is made: the receiver never gets a
// request, and the sink's failure says why. Allowed, the same sinks are
// sent to.
func TestSinkRefusedAtDial(t *testing.T) {
	rcv := newReceiver(t)
	port := strings.TrimPrefix(rcv.srv.URL, "http://127.0.0.1:")

	e := newSinkEnv(t, nil)
	e.addSink(t, "http://localhost:"+port+"/by-name", nil) // a name passes when added
	e.addSink(t, rcv.srv.URL+"/by-address", loopback)      // added while loopback was allowed
	e.at(0)
	require.Empty(t, rcv.notifications(t), "nothing reaches loopback")
	sinks := e.sinks(t)
	require.Len(t, sinks, 2)
	for _, s := range sinks {
		require.EqualValues(t, 1, s.Failures, s.Target)
		require.Zero(t, s.Sent, s.Target)
		require.Contains(t, s.LastError, "alert sink address refused", s.Target)
		require.Contains(t, s.LastError, "is loopback", s.Target)
	}
	// Retried after the backoff: refused again.
	e.at(2 * time.Second)
	require.Empty(t, rcv.notifications(t))
	for _, s := range e.sinks(t) {
		require.EqualValues(t, 2, s.Failures, s.Target)
	}

	allowed := newSinkEnv(t, loopback)
	allowed.addSink(t, "http://localhost:"+port+"/by-name", nil)
	allowed.addSink(t, rcv.srv.URL+"/by-address", loopback)
	allowed.at(0)
	require.Equal(t, []string{"alert.firing secret_keys", "alert.firing secret_keys"}, rcv.types(t))
}

// TestSinkRedirectNotFollowed: a sink answering with a redirect fails, as
// any answer but 2xx does, and the place it points to gets nothing.
func TestSinkRedirectNotFollowed(t *testing.T) {
	elsewhere := newReceiver(t)
	var redirected atomic.Int32
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Add(1)
		http.Redirect(w, r, elsewhere.srv.URL+"/stolen", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	e := newSinkEnv(t, loopback)
	e.addSink(t, redirecting.URL, loopback)
	e.at(0)
	require.Equal(t, int32(1), redirected.Load())
	require.Empty(t, elsewhere.notifications(t), "the redirect is not followed")
	sinks := e.sinks(t)
	require.Len(t, sinks, 1)
	require.EqualValues(t, 1, sinks[0].Failures)
	require.Equal(t, "post to "+sinks[0].Target+": answered 307, a redirect: not followed", sinks[0].LastError)
}

// TestNewSinkRefusesAddresses: a sink whose URL names a loopback,
// link-local, private, unspecified or multicast address (IPv4, IPv6 or
// IPv4-mapped) is refused when it is added, unless allowed; names are
// checked when they are dialed (above). Nothing is sent anywhere.
func TestNewSinkRefusesAddresses(t *testing.T) {
	ring := newRing(t)
	add := func(rawURL string, allow []netip.Prefix) error {
		_, _, err := alert.NewSink(ring, alert.SinkWebhook, rawURL, allow, base)
		return err
	}
	for _, u := range []string{
		"http://127.0.0.1/", "http://127.8.9.10:8080/", "http://[::1]/", "https://169.254.169.254/latest/meta-data/",
		"http://[fe80::1%25eth0]/", "http://10.1.2.3/", "http://172.16.0.1/", "http://172.31.255.255/",
		"http://192.168.1.1/", "http://[fd00:ec2::254]/", "http://0.0.0.0/", "http://[::]/", "http://224.0.0.1/",
		"http://[ff02::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "http://[::ffff:a01:203]/",
		"http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1./",
	} {
		err := add(u, nil)
		require.ErrorIs(t, err, alert.ErrSinkAddress, u)
	}
	err := add("https://169.254.169.254/", nil)
	require.EqualError(t, err, "alert sink address refused: 169.254.169.254 is link-local (RELAY_ALERT_SINK_ALLOW lists the networks sinks may reach)")

	for _, u := range []string{"https://hooks.slack.com/services/T/B/x", "https://203.0.113.7/alerts", "http://172.32.0.1/",
		"https://[2001:db8::1]/", "https://ops.example.com:8443/relay"} {
		require.NoError(t, add(u, nil), u)
	}

	allow, err := alert.ParseSinkAllow(" 127.0.0.1, 10.20.0.0/16,::1 ")
	require.NoError(t, err)
	for _, u := range []string{"http://127.0.0.1:9000/", "http://[::ffff:127.0.0.1]/", "http://10.20.3.4/", "http://[::1]/"} {
		require.NoError(t, add(u, allow), u)
	}
	for _, u := range []string{"http://127.0.0.2/", "http://10.21.0.1/", "http://169.254.169.254/"} {
		require.ErrorIs(t, add(u, allow), alert.ErrSinkAddress, u)
	}

	for _, bad := range []string{"10.0.0.0/33", "hooks.local", "fe80::1%eth0", "127.0.0.1/8/8"} {
		_, err := alert.ParseSinkAllow(bad)
		require.Error(t, err, bad)
	}
	none, err := alert.ParseSinkAllow("")
	require.NoError(t, err)
	require.Empty(t, none)
}
