package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/sweep"
	"github.com/relaykit/relay/shared"
)

// The whole delivery schedule, driven through the real heartbeat API and
// the real background jobs on a fake clock: nothing sleeps.

// agent is a claimed host that can refresh its token as time passes.
type agent struct {
	b          *bundle
	id, cred   string
	token      string
	tokenUntil time.Time
}

func (b *bundle) claimAgent(name string) *agent {
	b.t.Helper()
	var h shared.CreateHostResponse
	b.admin("POST", "/api/hosts", map[string]string{"name": name}).json(b.t, &h)
	require.Equal(b.t, 201, b.admin("PUT", "/api/hosts/"+h.ID+"/sources/github", map[string]any{"secrets": []string{testSecret},
		"options": unguarded}).status)
	var c shared.ClaimResponse
	a := b.do("POST", "/api/hosts/claim", jsonBody(shared.ClaimRequest{ClaimCode: h.ClaimCode}), nil)
	require.Equal(b.t, 200, a.status, string(a.body))
	a.json(b.t, &c)
	return &agent{b: b, id: h.ID, cred: c.HostCredential, token: c.Token, tokenUntil: c.TokenExpiresAt}
}

// beat sends one heartbeat, refreshing the token first when it is about to
// expire, and returns the webhooks handed out.
func (g *agent) beat(req shared.HeartbeatRequest) shared.HeartbeatResponse {
	g.b.t.Helper()
	if g.b.clock.Now().Add(time.Minute).After(g.tokenUntil) {
		var tr shared.TokenResponse
		a := g.b.do("POST", "/api/hosts/token", jsonBody(shared.TokenRequest{HostID: g.id, HostCredential: g.cred}), nil)
		require.Equal(g.b.t, 200, a.status, string(a.body))
		a.json(g.b.t, &tr)
		g.token, g.tokenUntil = tr.Token, tr.TokenExpiresAt
	}
	a := g.b.heartbeat(g.token, req)
	require.Equal(g.b.t, 200, a.status, string(a.body))
	var hb shared.HeartbeatResponse
	a.json(g.b.t, &hb)
	return hb
}

func (g *agent) send(event string) string {
	g.b.t.Helper()
	a := g.b.sendGitHub(g.id, event, prBody)
	require.Equal(g.b.t, 200, a.status, string(a.body))
	var r shared.IntakeResponse
	a.json(g.b.t, &r)
	return r.DeliveryID
}

func (g *agent) delivery(id string) *store.Delivery {
	g.b.t.Helper()
	d, err := g.b.store.DeliveryGet(context.Background(), g.id, id)
	require.NoError(g.b.t, err)
	return d
}

// trail is a delivery's audit trail as "from>to#attempt reason" lines.
func (g *agent) trail(id string) []string {
	g.b.t.Helper()
	evs, err := g.b.store.DeliveryEventList(context.Background(), id)
	require.NoError(g.b.t, err)
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s>%s#%d %s", e.From, e.To, e.Attempt, e.Reason))
	}
	return out
}

// upkeep runs the cloud's background jobs on the fake clock and returns a
// step that advances the clock and waits until every job has finished the
// passes that came due.
func (b *bundle) upkeep() func(time.Duration) {
	b.t.Helper()
	jobs := []sweep.Job{
		sweep.ExpireLeases(b.store, delivery.DefaultRetryPolicy, nil),
		sweep.Retention(b.clock, 0, sweep.DeliveryPruners(b.store, 7*24*time.Hour, 7*24*time.Hour)...),
		sweep.ExpireClaimCodes(b.store),
	}
	r := &sweep.Runner{Clock: b.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Jobs: jobs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	b.t.Cleanup(func() { cancel(); <-done })
	// Each job re-arms its timer once its pass is over.
	require.NoError(b.t, b.clock.BlockUntilContext(ctx, len(jobs)))
	return func(d time.Duration) {
		b.t.Helper()
		b.clock.Advance(d)
		require.NoError(b.t, b.clock.BlockUntilContext(ctx, len(jobs)))
	}
}

// scheduleOne is a host "h" with one webhook "d-1" queued, and the step of
// the background jobs.
func scheduleOne(t *testing.T) (*bundle, func(time.Duration), *agent, string) {
	t.Helper()
	b := setup(t)
	step := b.upkeep()
	g := b.claimAgent("h")
	return b, step, g, g.send("d-1")
}

func TestScheduleFiveFailuresThenDLQ(t *testing.T) {
	b, step, g, id := scheduleOne(t)

	waits := []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
	for attempt := 1; attempt <= 5; attempt++ {
		hb := g.beat(shared.HeartbeatRequest{})
		require.Len(t, hb.Webhooks, 1, "attempt %d", attempt)
		require.Equal(t, id, hb.Webhooks[0].DeliveryID)
		require.Equal(t, attempt, hb.Webhooks[0].Attempt)
		require.False(t, hb.More)
		g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0),
			WebhookNacks: []shared.Nack{{DeliveryID: id, Error: fmt.Sprintf("503 on attempt %d", attempt), Retryable: true}}})
		d := g.delivery(id)
		require.Equal(t, attempt, d.Attempts)
		if attempt == 5 {
			require.Equal(t, store.StatusDLQ, d.Status, "dead-lettered after the fifth failure")
			require.Equal(t, "503 on attempt 5", d.LastError)
			break
		}
		require.Equal(t, store.StatusRetrying, d.Status)
		wait := waits[attempt-1]
		require.Equal(t, b.clock.Now().UTC().Truncate(time.Millisecond).Add(wait), d.NextRetryAt.UTC(), "attempt %d", attempt)
		step(wait - time.Second)
		require.Empty(t, g.beat(shared.HeartbeatRequest{}).Webhooks, "not before its time (attempt %d)", attempt)
		step(time.Second)
	}
	step(24 * time.Hour)
	require.Empty(t, g.beat(shared.HeartbeatRequest{}).Webhooks, "dead letters are not handed out")
	require.Equal(t, store.StatusDLQ, g.delivery(id).Status)
	trail := g.trail(id)
	require.Len(t, trail, 1+5*3, "received, then leased, delivered and nacked five times")
	require.Equal(t, "delivered>dlq#5 nacked by host: attempts exhausted, dead-lettered", trail[len(trail)-1])
}

func TestScheduleNotRetryableDeadLettersAtOnce(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	id := g.send("d-1")
	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)
	g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0),
		WebhookNacks: []shared.Nack{{DeliveryID: id, Error: "422", Retryable: false}}})
	d := g.delivery(id)
	require.Equal(t, store.StatusDLQ, d.Status)
	require.Equal(t, 1, d.Attempts)
}

func TestScheduleOfTheSource(t *testing.T) {
	b := setup(t)
	step := b.upkeep()
	g := b.claimAgent("h")
	a := b.admin("PUT", "/api/hosts/"+g.id+"/sources/github", map[string]any{"retry_schedule_s": []float64{0, 5, 20}, "options": unguarded})
	require.Equal(t, 200, a.status, string(a.body))
	id := g.send("d-1")
	require.Equal(t, 3, g.delivery(id).MaxAttempts)

	for attempt, wait := range []time.Duration{5 * time.Second, 20 * time.Second} {
		require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1, "attempt %d", attempt+1)
		g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: id, Retryable: true}}})
		require.Equal(t, b.clock.Now().UTC().Truncate(time.Millisecond).Add(wait), g.delivery(id).NextRetryAt.UTC())
		step(wait)
	}
	// The third attempt's lease expires: the source's schedule says that
	// was the last.
	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)
	step(time.Minute + time.Second) // the test server's lease is a minute
	d := g.delivery(id)
	require.Equal(t, store.StatusDLQ, d.Status)
	require.Equal(t, 3, d.Attempts)

	// A schedule changed later applies to new deliveries only.
	a = b.admin("PUT", "/api/hosts/"+g.id+"/sources/github", map[string]any{"retry_schedule_s": []float64{0, 1}, "max_attempts": 9, "options": unguarded})
	require.Equal(t, 200, a.status, string(a.body))
	require.Equal(t, 3, g.delivery(id).MaxAttempts)
	require.Equal(t, 9, g.delivery(g.send("d-2")).MaxAttempts)
}

func TestScheduleLeaseExpiry(t *testing.T) {
	_, step, g, id := scheduleOne(t)

	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)
	step(59 * time.Second)
	require.Equal(t, store.StatusDelivered, g.delivery(id).Status, "the lease (a minute) holds")
	step(2 * time.Second)
	d := g.delivery(id)
	require.Equal(t, store.StatusRetrying, d.Status, "an expired lease is a failed attempt")
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, "lease expired", d.LastError)
	require.Empty(t, g.beat(shared.HeartbeatRequest{}).Webhooks, "the retry waits its 30 s")
	step(30 * time.Second)
	hb := g.beat(shared.HeartbeatRequest{})
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, 2, hb.Webhooks[0].Attempt)
	// A nack arriving after its lease expired was already counted.
	step(61 * time.Second)
	require.Equal(t, store.StatusRetrying, g.delivery(id).Status)
	g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookNacks: []shared.Nack{{DeliveryID: id, Retryable: false}}})
	d = g.delivery(id)
	require.Equal(t, store.StatusRetrying, d.Status, "the late nack changes nothing")
	require.Equal(t, 2, d.Attempts)
	require.Equal(t, []string{
		">queued#0 received",
		"queued>delivering#1 leased to a heartbeat",
		"delivering>delivered#1 written to the host",
		"delivered>retrying#1 lease expired",
		"retrying>delivering#2 leased to a heartbeat",
		"delivering>delivered#2 written to the host",
		"delivered>retrying#2 lease expired",
	}, g.trail(id))
}

func TestScheduleExtendsKeepTheLease(t *testing.T) {
	b, step, g, id := scheduleOne(t)
	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)

	// A handler that runs for ten minutes, while the host heartbeats every
	// 30 s with the delivery in webhook_extends.
	for range 20 {
		step(30 * time.Second)
		hb := g.beat(shared.HeartbeatRequest{WebhookExtends: []string{id}})
		require.Empty(t, hb.Webhooks, "not handed out again meanwhile")
		d := g.delivery(id)
		require.Equal(t, store.StatusDelivered, d.Status)
		require.Equal(t, 1, d.Attempts, "extending is not an attempt")
		require.Equal(t, b.clock.Now().UTC().Truncate(time.Millisecond).Add(time.Minute), d.LeaseExpiresAt.UTC())
	}
	g.beat(shared.HeartbeatRequest{WebhookAcks: []string{id}})
	d := g.delivery(id)
	require.Equal(t, store.StatusAcked, d.Status)
	require.Equal(t, 1, d.Attempts)
	require.Len(t, g.trail(id), 3+20+1, "received, leased, delivered, 20 extends, acked")
}

func TestScheduleOfflineHostBurnsNoAttempts(t *testing.T) {
	b := setup(t)
	step := b.upkeep()
	g := b.claimAgent("h")
	var ids []string
	for i := range 3 {
		ids = append(ids, g.send(fmt.Sprintf("d-%d", i)))
	}
	// Six hours without a heartbeat, the background jobs running all along.
	for range 6 * 60 {
		step(time.Minute)
	}
	for _, id := range ids {
		d := g.delivery(id)
		require.Equal(t, store.StatusQueued, d.Status)
		require.Zero(t, d.Attempts)
		require.Equal(t, []string{">queued#0 received"}, g.trail(id))
	}
	// Back online: everything is a first attempt, oldest first.
	hb := g.beat(shared.HeartbeatRequest{})
	require.Len(t, hb.Webhooks, 3)
	for i, w := range hb.Webhooks {
		require.Equal(t, ids[i], w.DeliveryID)
		require.Equal(t, 1, w.Attempt)
	}
}

func TestScheduleLateAckAfterReLease(t *testing.T) {
	b, step, g, id := scheduleOne(t)
	require.Len(t, g.beat(shared.HeartbeatRequest{}).Webhooks, 1)
	// The handler is slow and the host does not extend: the lease expires
	// and the delivery is handed out again.
	step(61 * time.Second)
	step(30 * time.Second)
	hb := g.beat(shared.HeartbeatRequest{})
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, 2, hb.Webhooks[0].Attempt)

	// The first run's ack arrives: it still counts.
	g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookAcks: []string{id}})
	d := g.delivery(id)
	require.Equal(t, store.StatusAcked, d.Status)
	require.Nil(t, d.LeaseExpiresAt)
	// The second run, deduplicated by the host's ledger, acks again:
	// harmless. Its lease is gone, so nothing expires later either.
	g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0), WebhookAcks: []string{id}})
	step(time.Hour)
	require.Equal(t, store.StatusAcked, g.delivery(id).Status)
	trail := g.trail(id)
	require.Equal(t, "delivered>acked#2 acked by host", trail[len(trail)-1])
	require.Len(t, trail, 7)
	require.Empty(t, g.beat(shared.HeartbeatRequest{}).Webhooks)

	// Seven days later retention prunes it with its trail.
	step(7*24*time.Hour + time.Minute)
	_, err := b.store.DeliveryGet(context.Background(), g.id, id)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestScheduleMoreIsExact(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	for i := range 5 {
		g.send(fmt.Sprintf("d-%d", i))
	}
	hb := g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(2)})
	require.Len(t, hb.Webhooks, 2)
	require.True(t, hb.More)
	hb = g.beat(shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(3)})
	require.Len(t, hb.Webhooks, 3)
	require.False(t, hb.More, "a batch that takes the last ones says so")
}

// A host heartbeating back to back (draining a backlog) has its last
// heartbeat written at most once a second, unless something about it
// changed.
func TestHeartbeatRecordedAtMostOnceASecond(t *testing.T) {
	b := setup(t)
	g := b.claimAgent("h")
	last := func() time.Time {
		h, err := b.store.HostGet(context.Background(), g.id)
		require.NoError(t, err)
		require.NotNil(t, h.LastHeartbeatAt)
		return *h.LastHeartbeatAt
	}
	start := b.clock.Now().UTC().Truncate(time.Millisecond)
	g.beat(shared.HeartbeatRequest{AgentVersion: "1.0"})
	require.Equal(t, start, last())

	b.clock.Advance(400 * time.Millisecond)
	g.beat(shared.HeartbeatRequest{AgentVersion: "1.0"})
	require.Equal(t, start, last(), "nothing changed 400 ms later")

	b.clock.Advance(600 * time.Millisecond)
	g.beat(shared.HeartbeatRequest{AgentVersion: "1.0"})
	require.Equal(t, start.Add(time.Second), last(), "a second later")

	b.clock.Advance(100 * time.Millisecond)
	g.beat(shared.HeartbeatRequest{AgentVersion: "1.1"})
	require.Equal(t, start.Add(1100*time.Millisecond), last(), "a new agent version")
	b.clock.Advance(100 * time.Millisecond)
	g.beat(shared.HeartbeatRequest{AgentVersion: "1.1", Config: &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{}}})
	require.Equal(t, start.Add(1200*time.Millisecond), last(), "a new subscription")
}
