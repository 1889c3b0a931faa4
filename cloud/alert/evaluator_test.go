package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/verify"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// receiver is a sink endpoint: it records what it was sent, answering
// with refuse's status while refuse is set.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []received
	// refuse, when not 0, is answered instead of 200.
	refuse int
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.refuse != 0 {
			w.WriteHeader(r.refuse)
			return
		}
		r.got = append(r.got, received{req.Header.Clone(), body})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setRefuse(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = status
}

// notifications returns what arrived, decoded.
func (r *receiver) notifications(t *testing.T) []alert.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]alert.Notification, len(r.got))
	for i, g := range r.got {
		require.NoError(t, json.Unmarshal(g.body, &out[i]))
	}
	return out
}

func (r *receiver) types(t *testing.T) []string {
	var out []string
	for _, n := range r.notifications(t) {
		out = append(out, n.Type+" "+n.Data.Rule)
	}
	return out
}

type env struct {
	st     store.Store
	ring   *secrets.Ring
	clock  *clockwork.FakeClock
	eval   *alert.Evaluator
	sink   *receiver
	secret string
	host   *store.Host
}

func newRing(t testing.TB) *secrets.Ring {
	key := make([]byte, 32)
	key[0] = 7
	ring, err := secrets.NewRing(key)
	require.NoError(t, err)
	return ring
}

func openSQLite(t testing.TB) store.Store {
	return sqlitetest.Open(t)
}

func evalConfig(cfg alert.Config) alert.Config {
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Resend == 0 {
		cfg.Resend = time.Hour
	}
	cfg.Presence = alert.PresenceConfig{LateAfter: time.Minute, OfflineAfter: 3 * time.Minute}
	cfg.PublicURL = "https://relay.example"
	// The receivers are on loopback, which sinks reach only when allowed.
	cfg.SinkAllow = loopback
	return cfg
}

// loopback is what RELAY_ALERT_SINK_ALLOW=127.0.0.0/8 allows.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func newEnv(t *testing.T, st store.Store, cfg alert.Config) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{st: st, ring: newRing(t), clock: clockwork.NewFakeClockAt(base), sink: newReceiver(t)}
	e.eval = alert.New(st, e.ring, evalConfig(cfg), e.clock, slog.New(slog.DiscardHandler))
	sink, secret, err := alert.NewSink(e.ring, alert.SinkWebhook, e.sink.srv.URL, loopback, base)
	require.NoError(t, err)
	require.NoError(t, st.AlertSinkCreate(ctx, sink))
	e.secret = secret
	e.host = claimedHost(t, st, "h_one", "one")
	return e
}

func claimedHost(t testing.TB, st store.Store, id, name string) *store.Host {
	ctx := context.Background()
	_, err := st.HostCreate(ctx, &store.HostCreateParams{ID: id, Name: name, ClaimCodeHash: []byte("code-" + id),
		ClaimExpiresAt: base.Add(time.Hour), Now: base})
	require.NoError(t, err)
	h, err := st.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: []byte("code-" + id), CredentialHash: []byte("cred-" + id), Now: base})
	require.NoError(t, err)
	return h
}

// at moves the clock to base+d and ticks the evaluator.
func (e *env) at(d time.Duration) {
	e.clock.Advance(base.Add(d).Sub(e.clock.Now()))
	e.eval.Tick(context.Background())
}

func (e *env) beat(t *testing.T, d time.Duration) {
	require.NoError(t, e.st.HostHeartbeat(context.Background(), &store.HostHeartbeatParams{HostID: e.host.ID, Now: base.Add(d)}))
}

func (e *env) receive(t *testing.T, eventID string, d time.Duration, o ...func(*store.DeliveryInsertParams)) string {
	p := &store.DeliveryInsertParams{ID: "github:" + eventID, HostID: e.host.ID, Source: "github", EventID: eventID,
		Headers: map[string]string{}, RawBody: []byte(`{}`), ReceivedAt: base.Add(d)}
	for _, f := range o {
		f(p)
	}
	_, err := e.st.DeliveryInsert(context.Background(), p)
	require.NoError(t, err)
	return p.ID
}

func TestPresence(t *testing.T) {
	e := newEnv(t, openSQLite(t), alert.Config{})
	ctx := context.Background()
	e.beat(t, 0)
	e.at(0)
	presence := func() []string {
		evs, err := e.st.PresenceEventList(ctx, e.host.ID, 0)
		require.NoError(t, err)
		var out []string
		for i := len(evs) - 1; i >= 0; i-- {
			out = append(out, string(evs[i].From)+">"+string(evs[i].To)+" "+evs[i].Lasted.String())
		}
		return out
	}
	require.Equal(t, []string{">online 0s"}, presence())
	e.at(60 * time.Second)
	require.Equal(t, []string{">online 0s"}, presence(), "online up to LateAfter")
	e.at(70 * time.Second)
	require.Equal(t, []string{">online 0s", "online>late 1m10s"}, presence())
	e.at(190 * time.Second)
	require.Equal(t, []string{">online 0s", "online>late 1m10s", "late>offline 2m0s"}, presence())
	e.beat(t, 10*time.Minute)
	e.at(10*time.Minute + 5*time.Second)
	require.Equal(t, []string{">online 0s", "online>late 1m10s", "late>offline 2m0s", "offline>online 6m55s"}, presence())
	require.Equal(t, alert.PresenceConfig{LateAfter: time.Minute, OfflineAfter: 3 * time.Minute}.Of(ptr(base), nil, base.Add(2*time.Minute)), store.PresenceLate)
}

func ptr[T any](v T) *T { return &v }

// A host offline with webhooks waiting: fires once, is re-sent on the
// slower cadence, and resolves when the host is back. Every notification
// is signed with Standard Webhooks and verifies as a relay verifies one.
func TestOfflineWithWork(t *testing.T) {
	e := newEnv(t, openSQLite(t), alert.Config{Resend: 30 * time.Minute})
	require.NoError(t, e.st.AlertRuleSet(context.Background(), &store.AlertRuleSetting{Rule: alert.RuleOldestPending, Disabled: true}))
	e.beat(t, 0)
	e.at(0)
	e.receive(t, "a", time.Minute)
	e.at(2 * time.Minute)
	require.Empty(t, e.sink.types(t), "late is not offline")
	e.at(3*time.Minute + 10*time.Second)
	require.Equal(t, []string{"alert.firing host_offline_with_work"}, e.sink.types(t))
	n := e.sink.notifications(t)[0]
	require.Equal(t, "https://relay.example/api/hosts/h_one/webhooks", n.Data.Link)
	require.Contains(t, n.Data.Summary, "Host one (h_one): offline since")
	require.Contains(t, n.Data.Summary, "(less than a second ago) with 1 webhook waiting")

	for d := 3 * time.Minute; d < 34*time.Minute; d += 10 * time.Second {
		e.at(d + 10*time.Second)
	}
	require.Equal(t, []string{"alert.firing host_offline_with_work", "alert.reminder host_offline_with_work"}, e.sink.types(t),
		"fired once, re-sent after 30 min")

	e.beat(t, 35*time.Minute)
	e.at(35*time.Minute + 5*time.Second)
	require.Equal(t, []string{"alert.firing host_offline_with_work", "alert.reminder host_offline_with_work",
		"alert.resolved host_offline_with_work"}, e.sink.types(t))
	resolved := e.sink.notifications(t)[2]
	require.Equal(t, base.Add(35*time.Minute+5*time.Second), *resolved.Data.ResolvedAt)

	standard, ok := verify.Lookup("standard")
	require.True(t, ok)
	e.sink.mu.Lock()
	defer e.sink.mu.Unlock()
	ids := map[string]bool{}
	for _, g := range e.sink.got {
		err := standard.Verify(&verify.Request{Header: g.header, Body: g.body, Now: e.clock.Now()}, [][]byte{[]byte(e.secret)}, nil)
		if err != nil {
			// Signed when sent: verify at the time it says.
			sent := parseUnix(t, g.header.Get("webhook-timestamp"))
			err = standard.Verify(&verify.Request{Header: g.header, Body: g.body, Now: sent}, [][]byte{[]byte(e.secret)}, nil)
		}
		require.NoError(t, err)
		ids[g.header.Get("webhook-id")] = true
	}
	require.Len(t, ids, 3, "one message id each")
}

func parseUnix(t *testing.T, s string) time.Time {
	var n int64
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return time.Unix(n, 0)
}

// Each of the other rules fires once and resolves.
func TestRules(t *testing.T) {
	ctx := context.Background()
	t.Run("host_offline", func(t *testing.T) {
		e := newEnv(t, openSQLite(t), alert.Config{})
		e.beat(t, 0)
		for d := time.Duration(0); d <= 64*time.Minute; d += 10 * time.Second {
			e.at(d)
		}
		require.Equal(t, []string{"alert.firing host_offline"}, e.sink.types(t), "after an hour offline, idle")
		e.beat(t, 65*time.Minute)
		e.at(65*time.Minute + time.Second)
		require.Equal(t, []string{"alert.firing host_offline", "alert.resolved host_offline"}, e.sink.types(t))
	})
	t.Run("oldest_pending", func(t *testing.T) {
		e := newEnv(t, openSQLite(t), alert.Config{})
		require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{HostID: e.host.ID, Rule: alert.RuleOffline, Disabled: true}))
		require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{HostID: e.host.ID, Rule: alert.RuleOfflineWithWork, Disabled: true}))
		// Per host: five minutes rather than fifteen.
		require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{HostID: e.host.ID, Rule: alert.RuleOldestPending, Threshold: 300_000}))
		id := e.receive(t, "a", 0)
		e.at(4 * time.Minute)
		require.Empty(t, e.sink.types(t))
		e.at(5 * time.Minute)
		require.Equal(t, []string{"alert.firing oldest_pending"}, e.sink.types(t))
		_, err := e.st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: e.host.ID, Max: 1, LeaseFor: time.Minute, Now: base.Add(5 * time.Minute)})
		require.NoError(t, err)
		_, err = e.st.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: e.host.ID, IDs: []string{id}, Now: base.Add(5 * time.Minute)})
		require.NoError(t, err)
		e.at(6 * time.Minute)
		require.Equal(t, []string{"alert.firing oldest_pending", "alert.resolved oldest_pending"}, e.sink.types(t))
	})
	t.Run("dead_letters_and_repeated_failures", func(t *testing.T) {
		e := newEnv(t, openSQLite(t), alert.Config{})
		require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{Rule: alert.RuleOldestPending, Disabled: true}))
		e.beat(t, 0)
		one := func(p *store.DeliveryInsertParams) { p.MaxAttempts = 1 }
		e.receive(t, "dead", 0, one)
		e.receive(t, "flaky", 0)
		fail := func(d time.Duration) {
			now := base.Add(d)
			e.beat(t, d)
			leased, err := e.st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: e.host.ID, Max: 10, LeaseFor: time.Minute, Now: now})
			require.NoError(t, err)
			var nacks []delivery.Nack
			for _, l := range leased.Deliveries {
				nacks = append(nacks, delivery.Nack{ID: l.ID, Error: "500", Retryable: true})
			}
			_, err = e.st.DeliveryNack(ctx, delivery.NackParams(e.host.ID, nacks, delivery.RetryPolicy{Delays: []time.Duration{0, time.Second}}, now))
			require.NoError(t, err)
		}
		fail(0)
		e.at(time.Second)
		require.Equal(t, []string{"alert.firing dead_letters"}, e.sink.types(t))
		require.Equal(t, "Host one (h_one): 1 webhook dead-lettered in the last hour (1 in all)", e.sink.notifications(t)[0].Data.Summary)
		fail(10 * time.Second)
		fail(20 * time.Second)
		e.at(21 * time.Second)
		require.Equal(t, []string{"alert.firing dead_letters", "alert.firing repeated_failures"}, e.sink.types(t))
		require.Equal(t, "github", e.sink.notifications(t)[1].Data.Source)
		// Past the dead letters' window; the flaky one is retried by hand.
		_, err := e.st.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: e.host.ID, ID: "github:flaky", Now: base.Add(time.Minute)})
		require.NoError(t, err)
		e.beat(t, 61*time.Minute)
		e.at(61*time.Minute + time.Second)
		require.ElementsMatch(t, []string{"alert.firing dead_letters", "alert.firing repeated_failures",
			"alert.resolved dead_letters", "alert.resolved repeated_failures"}, e.sink.types(t))
	})
	t.Run("cloud_wide", func(t *testing.T) {
		keysOK, fivexx := true, uint64(0)
		st := openSQLite(t)
		e := newEnv(t, st, alert.Config{
			KeysOK:    func(context.Context) (bool, error) { return keysOK, nil },
			Intake5xx: func() uint64 { return fivexx },
		})
		e.beat(t, 0)
		e.at(0)
		require.Empty(t, e.sink.types(t))
		keysOK, fivexx = false, 3
		_, err := st.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: store.QuarantinedRequest{HostID: e.host.ID, Source: "github", URL: "/x",
			Header: map[string][]string{}, Body: []byte("{}"), ReceivedAt: base}, MaxRows: 10, MaxBytes: 1 << 20, HostMaxRows: 10, HostMaxBytes: 1 << 20})
		require.NoError(t, err)
		e.beat(t, 10*time.Second)
		e.at(10 * time.Second)
		require.ElementsMatch(t, []string{"alert.firing secret_keys", "alert.firing intake_5xx", "alert.firing quarantine_not_empty"}, e.sink.types(t))
		keysOK = true
		qs, err := st.QuarantineList(ctx, &store.QuarantineListParams{})
		require.NoError(t, err)
		require.NoError(t, st.QuarantineDelete(ctx, qs[0].ID))
		e.beat(t, 20*time.Second)
		e.at(20 * time.Second)
		require.Len(t, e.sink.types(t), 5, "each resolved but intake_5xx, counted for a minute: %v", e.sink.types(t))
		e.beat(t, 2*time.Minute)
		e.at(2 * time.Minute)
		require.Len(t, e.sink.types(t), 6, "each resolved: %v", e.sink.types(t))
		require.Equal(t, "alert.resolved intake_5xx", e.sink.types(t)[5])
	})
}

// What a replica's intake answered with 5xx since its last write is
// written when it stops.
func TestIntake5xxWrittenOnStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openSQLite(t)
	clock := clockwork.NewFakeClockAt(base)
	var fivexx atomic.Uint64
	e := alert.New(st, newRing(t), evalConfig(alert.Config{Intake5xx: fivexx.Load}), clock, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the first tick done, waiting for the next
	fivexx.Add(4)
	cancel()
	<-done
	n, err := st.Intake5xxSum(context.Background(), &store.Intake5xxSumParams{Since: base.Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
}

// failingCounts is a store that cannot write intake 5xx counts while
// fail is set.
type failingCounts struct {
	store.Store
	mu   sync.Mutex
	fail bool
}

func (f *failingCounts) set(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func (f *failingCounts) Intake5xxAdd(ctx context.Context, p *store.Intake5xxAddParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("disk I/O error")
	}
	return f.Store.Intake5xxAdd(ctx, p)
}

// The intake 5xx rule counts a minute of every replica's 5xx from the
// store, up to the threshold; a replica that cannot write its count still
// sees it when it evaluates, and writes it once the store takes it.
func TestIntake5xx(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	fivexx := uint64(0)
	answer := func(n uint64) {
		mu.Lock()
		defer mu.Unlock()
		fivexx += n
	}
	st := &failingCounts{Store: openSQLite(t)}
	e := newEnv(t, st.Store, alert.Config{})
	e.eval = alert.New(st, e.ring, evalConfig(alert.Config{Holder: "a", Intake5xx: func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return fivexx
	}}), e.clock, slog.New(slog.DiscardHandler))
	stored := func() int64 {
		n, err := e.st.Intake5xxSum(ctx, &store.Intake5xxSumParams{Since: base.Add(-time.Hour)})
		require.NoError(t, err)
		return n
	}
	e.beat(t, 0)
	e.at(0)
	answer(2)
	e.at(10 * time.Second)
	require.Equal(t, []string{"alert.firing intake_5xx"}, e.sink.types(t))
	require.Contains(t, e.sink.notifications(t)[0].Data.Summary, "intake answered 2 requests with 5xx since 2026-03-01T11:59:00Z")
	require.Equal(t, int64(2), stored())
	for d := 20 * time.Second; d < 2*time.Minute; d += 10 * time.Second {
		e.at(d)
	}
	require.Equal(t, []string{"alert.firing intake_5xx"}, e.sink.types(t), "counted until the window passed its minute")
	e.at(2 * time.Minute)
	require.Equal(t, []string{"alert.firing intake_5xx", "alert.resolved intake_5xx"}, e.sink.types(t))

	// A threshold of 5: 3, then 2 more within the window.
	require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{Rule: alert.RuleIntake5xx, Threshold: 5}))
	answer(3)
	e.at(2*time.Minute + 10*time.Second)
	require.Len(t, e.sink.types(t), 2, "3 of 5")
	answer(2)
	e.at(2*time.Minute + 20*time.Second)
	require.Equal(t, "alert.firing intake_5xx", e.sink.types(t)[2])
	e.at(4 * time.Minute)
	require.Equal(t, "alert.resolved intake_5xx", e.sink.types(t)[3])
	require.Equal(t, int64(7), stored())

	// The store cannot take the count: this replica counts it itself,
	// every evaluation until it is written, and writes it once.
	st.set(true)
	answer(5)
	e.at(4*time.Minute + 10*time.Second)
	require.Equal(t, "alert.firing intake_5xx", e.sink.types(t)[4])
	for d := 4*time.Minute + 20*time.Second; d <= 7*time.Minute; d += 10 * time.Second {
		e.at(d)
	}
	require.Len(t, e.sink.types(t), 5, "still firing while the count is unwritten")
	require.Equal(t, int64(7), stored())
	st.set(false)
	e.at(7*time.Minute + 10*time.Second)
	require.Equal(t, int64(12), stored(), "written once")
	for d := 7*time.Minute + 20*time.Second; d <= 9*time.Minute; d += 10 * time.Second {
		e.at(d)
	}
	require.Equal(t, int64(12), stored(), "written once")
	require.Equal(t, "alert.resolved intake_5xx", e.sink.types(t)[5])
	require.Len(t, e.sink.types(t), 6)
}

// A sink that refuses for a while gets every notification afterwards, in
// order; its failures show on the sink.
func TestSinkDownThenUp(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, openSQLite(t), alert.Config{Resend: time.Minute})
	slack := newReceiver(t)
	sink, secret, err := alert.NewSink(e.ring, alert.SinkSlack, slack.srv.URL+"/services/T0/B0/token", loopback, base)
	require.NoError(t, err)
	require.Empty(t, secret, "a Slack sink has no signing secret")
	require.NoError(t, e.st.AlertSinkCreate(ctx, sink))
	require.Equal(t, "http://"+slack.srv.Listener.Addr().String(), sink.Target, "the token is not shown")

	e.sink.setRefuse(503)
	slack.setRefuse(500)
	e.beat(t, 0)
	e.receive(t, "a", 0)
	for d := time.Duration(0); d <= 5*time.Minute; d += time.Second {
		e.at(d)
	}
	require.Empty(t, e.sink.types(t))
	sinks, err := e.st.AlertSinkList(ctx)
	require.NoError(t, err)
	require.Len(t, sinks, 2)
	for _, s := range sinks {
		want := map[string]int{alert.SinkWebhook: 503, alert.SinkSlack: 500}[s.Kind]
		require.Equal(t, fmt.Sprintf("post to %s: answered %d", s.Target, want), s.LastError)
		require.Positive(t, s.Failures)
		require.Positive(t, s.Queued)
		require.NotNil(t, s.FailingSince)
	}

	e.beat(t, 5*time.Minute)
	e.sink.setRefuse(0)
	slack.setRefuse(0)
	for d := 5 * time.Minute; d <= 12*time.Minute; d += time.Second {
		if d%(30*time.Second) == 0 {
			e.beat(t, d)
		}
		e.at(d)
	}
	got := e.sink.types(t)
	require.Equal(t, "alert.firing host_offline_with_work", got[0])
	require.Equal(t, "alert.resolved host_offline_with_work", got[len(got)-1], "in order")
	require.Len(t, slack.got, len(got), "the Slack sink got as many")
	var msg struct{ Text string }
	require.NoError(t, json.Unmarshal(slack.got[0].body, &msg))
	require.Contains(t, msg.Text, "*Firing* `host_offline_with_work`: Host one (h_one): offline since")
	require.Contains(t, msg.Text, "<https://relay.example/api/hosts/h_one/webhooks|Open in the relay>")
	sinks, err = e.st.AlertSinkList(ctx)
	require.NoError(t, err)
	for _, s := range sinks {
		require.Zero(t, s.Queued)
		require.Zero(t, s.Failures)
		require.Equal(t, int64(len(got)), s.Sent)
	}
}

// gauge reads one unlabelled gauge of m.
func gauge(t *testing.T, m *alert.Metrics, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A group whose members are all offline while its any webhooks wait fires
// group_offline_with_work (once, for the group) beside its holder's own
// host rule; a member back resolves it.
func TestGroupOfflineWithWork(t *testing.T) {
	e := newEnv(t, openSQLite(t), alert.Config{})
	ctx := context.Background()
	for _, rule := range []string{alert.RuleOldestPending, alert.RuleOfflineWithWork, alert.RuleOffline} {
		require.NoError(t, e.st.AlertRuleSet(ctx, &store.AlertRuleSetting{Rule: rule, Disabled: true}))
	}
	two := claimedHost(t, e.st, "h_two", "two")
	_, err := e.st.GroupCreate(ctx, &store.GroupCreateParams{ID: "g_team", Name: "team", Now: base})
	require.NoError(t, err)
	for _, h := range []string{e.host.ID, two.ID} {
		_, err = e.st.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: "g_team", HostID: h, Now: base})
		require.NoError(t, err)
	}
	e.beat(t, 0)
	require.NoError(t, e.st.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: two.ID, Now: base.Add(time.Minute)}))
	e.at(time.Minute)
	e.receive(t, "a", time.Minute, func(p *store.DeliveryInsertParams) { p.GroupID = "g_team" })
	e.at(3*time.Minute + 10*time.Second)
	require.Empty(t, e.sink.types(t), "one member still not offline")
	e.at(4*time.Minute + 10*time.Second)
	require.Equal(t, []string{"alert.firing group_offline_with_work"}, e.sink.types(t))
	n := e.sink.notifications(t)[0]
	require.Equal(t, "https://relay.example/api/groups/g_team", n.Data.Link)
	require.Contains(t, n.Data.Summary, "group team (g_team): every member offline since")
	require.Contains(t, n.Data.Summary, "with 1 webhook waiting")

	require.NoError(t, e.st.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: two.ID, Now: base.Add(5 * time.Minute)}))
	e.at(5*time.Minute + 5*time.Second)
	require.Equal(t, []string{"alert.firing group_offline_with_work", "alert.resolved group_offline_with_work"}, e.sink.types(t))
}
