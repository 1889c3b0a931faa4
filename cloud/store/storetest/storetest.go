// Package storetest is the one conformance suite every store engine passes:
// each engine's tests call Exercise with a constructor of fresh, migrated
// stores. Time is driven only through params (a fixed base time plus
// offsets); nothing sleeps.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// base is the suite's fixed "now". Offsets from it drive every clock.
var base = time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)

const leaseFor = 5 * time.Minute

// testBundle is what setup gives each test besides the store.
type testBundle struct {
	host  *store.Host // active, with a pending claim code
	other *store.Host // another active host
}

// Exercise runs the suite. newStore must return a fresh, migrated store for
// t alone and close it at t.Cleanup. Subtests run in parallel.
func Exercise(ctx context.Context, t *testing.T, newStore func(t *testing.T) store.Store) {
	setup := func(t *testing.T) (store.Store, *testBundle) {
		t.Helper()
		s := newStore(t)
		return s, &testBundle{
			host:  createHost(ctx, t, s, "host-a", base),
			other: createHost(ctx, t, s, "host-b", base),
		}
	}

	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		require.NoError(t, s.Migrate(ctx), "re-running migrate is a no-op")
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Ping(ctx))
		got, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host, got, "data survives a re-run")
	})

	exerciseHosts(ctx, t, setup)
	exerciseSources(ctx, t, setup)
	exerciseDeliveries(ctx, t, setup)
	exerciseLease(ctx, t, setup)
	exerciseAckNack(ctx, t, setup)
	exerciseReleaseUnheld(ctx, t, setup)
	exerciseReport(ctx, t, setup)
	exerciseExpiry(ctx, t, setup)
	exerciseAudit(ctx, t, setup)
	exerciseConcurrency(ctx, t, setup)
	exerciseManage(ctx, t, setup)
	exerciseEdge(ctx, t, setup)
	exerciseReplayGuard(ctx, t, setup)
	exerciseStaleNack(ctx, t, setup)
	exerciseInsertRace(ctx, t, setup)
	exerciseBatch(ctx, t, setup)
	exerciseInsertLeased(ctx, t, setup)
	exerciseReplay(ctx, t, setup)
	exerciseChanged(ctx, t, setup)
	exerciseInspect(ctx, t, setup)
	exerciseAlerts(ctx, t, setup)
	exerciseConsole(ctx, t, setup)
	exerciseVolume(ctx, t, setup)
	exerciseIPSets(ctx, t, setup)
}

type setupFunc func(t *testing.T) (store.Store, *testBundle)

// --- helpers ---

func ptr[T any](v T) *T { return &v }

func hashOf(s string) []byte { return []byte("hash:" + s) }

func createHost(ctx context.Context, t *testing.T, s store.Store, id string, now time.Time) *store.Host {
	t.Helper()
	h, err := s.HostCreate(ctx, &store.HostCreateParams{
		ID:              id,
		Name:            "name of " + id,
		ClaimCodeHash:   hashOf("code-" + id),
		ClaimExpiresAt:  now.Add(24 * time.Hour),
		RateLimitPerMin: 100,
		RateLimitBurst:  20,
		Now:             now,
	})
	require.NoError(t, err)
	return h
}

// deliveryOpts varies an inserted delivery.
type deliveryOpts struct {
	source      string // default "github"
	body        []byte // default a small JSON body
	maxAttempts int
}

func deliveryID(source, eventID string, at time.Time) string {
	return fmt.Sprintf("%s:%s:%d", source, eventID, at.UnixMilli())
}

func insertParams(hostID, eventID string, at time.Time, o deliveryOpts) *store.DeliveryInsertParams {
	if o.source == "" {
		o.source = "github"
	}
	if o.body == nil {
		o.body = []byte(`{"event":"` + eventID + `"}`)
	}
	return &store.DeliveryInsertParams{
		ID:            deliveryID(o.source, eventID, at),
		HostID:        hostID,
		Source:        o.source,
		EventID:       eventID,
		EventType:     "pull_request",
		EventAction:   "opened",
		Headers:       map[string]string{"x-github-event": "pull_request", "x-github-delivery": eventID},
		RawBody:       o.body,
		MaxAttempts:   o.maxAttempts,
		CorrelationID: "corr-" + eventID,
		ReceivedAt:    at,
	}
}

func insert(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time, o deliveryOpts) *store.Delivery {
	t.Helper()
	res, err := s.DeliveryInsert(ctx, insertParams(hostID, eventID, at, o))
	require.NoError(t, err)
	require.Equal(t, store.InsertQueued, res.Outcome)
	return res.Delivery
}

func get(ctx context.Context, t *testing.T, s store.Store, hostID, id string) *store.Delivery {
	t.Helper()
	d, err := s.DeliveryGet(ctx, hostID, id)
	require.NoError(t, err)
	return d
}

func lease(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) []*store.Delivery {
	t.Helper()
	return leaseMore(ctx, t, s, hostID, max, maxBytes, now).Deliveries
}

func leaseMore(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) *store.DeliveryLeaseResult {
	t.Helper()
	res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: hostID, Max: max, MaxBytes: maxBytes, LeaseFor: leaseFor, Now: now})
	require.NoError(t, err)
	return res
}

// handOut leases as a heartbeat does whose answer was written: the leased
// deliveries are delivered (the returned copies still say delivering).
func handOut(ctx context.Context, t *testing.T, s store.Store, hostID string, max, maxBytes int, now time.Time) []*store.Delivery {
	t.Helper()
	leased := lease(ctx, t, s, hostID, max, maxBytes, now)
	n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: hostID, IDs: ids(leased), Now: now})
	require.NoError(t, err)
	require.Equal(t, len(leased), n)
	return leased
}

func ids(ds []*store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func nack(ctx context.Context, t *testing.T, s store.Store, hostID string, now time.Time, nacks ...delivery.Nack) int {
	t.Helper()
	n, err := s.DeliveryNack(ctx, delivery.NackParams(hostID, nacks, delivery.DefaultRetryPolicy, now))
	require.NoError(t, err)
	return n
}

func ack(ctx context.Context, t *testing.T, s store.Store, hostID string, now time.Time, ids ...string) int {
	t.Helper()
	n, err := s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: hostID, IDs: ids, Now: now})
	require.NoError(t, err)
	return n
}

func events(ctx context.Context, t *testing.T, s store.Store, id string) []*store.DeliveryEvent {
	t.Helper()
	evs, err := s.DeliveryEventList(ctx, id)
	require.NoError(t, err)
	return evs
}

func lastEvent(ctx context.Context, t *testing.T, s store.Store, id string) *store.DeliveryEvent {
	t.Helper()
	evs := events(ctx, t, s, id)
	require.NotEmpty(t, evs)
	return evs[len(evs)-1]
}

// requireLastEvent checks a delivery's last audit event, all but its id.
func requireLastEvent(ctx context.Context, t *testing.T, s store.Store, want store.DeliveryEvent) {
	t.Helper()
	got := *lastEvent(ctx, t, s, want.DeliveryID)
	got.ID = 0
	require.Equal(t, want, got)
}

// toDLQ inserts a delivery and dead-letters it with a non-retryable nack.
func toDLQ(ctx context.Context, t *testing.T, s store.Store, hostID, eventID string, at time.Time) *store.Delivery {
	t.Helper()
	d := insert(ctx, t, s, hostID, eventID, at, deliveryOpts{})
	leased := lease(ctx, t, s, hostID, 100, 0, at)
	require.Contains(t, ids(leased), d.ID)
	require.Equal(t, 1, nack(ctx, t, s, hostID, at, delivery.Nack{ID: d.ID, Error: "boom", Retryable: false}))
	d = get(ctx, t, s, hostID, d.ID)
	require.Equal(t, store.StatusDLQ, d.Status)
	return d
}

// --- hosts ---

func exerciseHosts(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("HostCreateGet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(123456789 * time.Nanosecond) // sub-millisecond digits are dropped
		h := createHost(ctx, t, s, "host-c", now)
		require.Equal(t, &store.Host{
			ID:              "host-c",
			Name:            "name of host-c",
			Status:          store.HostActive,
			Generation:      1,
			ClaimCodeHash:   hashOf("code-host-c"),
			ClaimExpiresAt:  ptr(base.Add(24*time.Hour + 123*time.Millisecond)),
			RateLimitPerMin: 100,
			RateLimitBurst:  20,
			CreatedAt:       base.Add(123 * time.Millisecond),
		}, h)

		got, err := s.HostGet(ctx, "host-c")
		require.NoError(t, err)
		require.Equal(t, h, got)

		got, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host, got)

		_, err = s.HostGet(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostCreateConflict", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: b.host.ID, Name: "again", ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour), Now: base})
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("HostList", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createHost(ctx, t, s, "host-z", base.Add(time.Second))
		createHost(ctx, t, s, "host-y", base.Add(2*time.Second))
		hosts, err := s.HostList(ctx)
		require.NoError(t, err)
		var got []string
		for _, h := range hosts {
			got = append(got, h.ID)
		}
		require.Equal(t, []string{b.host.ID, b.other.ID, "host-z", "host-y"}, got, "oldest first")
	})

	t.Run("HostClaim", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(time.Hour)
		h, err := s.HostClaim(ctx, &store.HostClaimParams{
			ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), AgentVersion: "1.2.3", Now: now,
		})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, h.ID)
		require.Equal(t, hashOf("cred"), h.CredentialHash)
		require.Nil(t, h.ClaimCodeHash, "the code is consumed")
		require.Nil(t, h.ClaimExpiresAt)
		require.Equal(t, ptr(now), h.ClaimedAt)
		require.Equal(t, "1.2.3", h.AgentVersion)
		require.Equal(t, b.host.Generation+1, h.Generation, "claiming revokes earlier tokens")

		got, err := s.HostGet(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, h, got)

		// Used: the same code again.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred2"), Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
		// Unknown code.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("never"), CredentialHash: hashOf("cred2"), Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
		// The other host's code is untouched by all this.
		got, err = s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, b.other, got)
	})

	t.Run("HostClaimExpired", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, now := range []time.Time{*b.host.ClaimExpiresAt, b.host.ClaimExpiresAt.Add(time.Hour)} {
			_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), Now: now})
			require.ErrorIs(t, err, store.ErrNotFound, "claim at %s", now)
		}
		// Just before expiry it still works.
		_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"),
			Now: b.host.ClaimExpiresAt.Add(-time.Millisecond)})
		require.NoError(t, err)
	})

	t.Run("HostClaimDeactivated", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: base})
		require.NoError(t, err)
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostSetClaimCode", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		h, err := s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.host.ID, ClaimCodeHash: hashOf("new"), ClaimExpiresAt: base.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, hashOf("new"), h.ClaimCodeHash)
		require.Equal(t, ptr(base.Add(time.Hour)), h.ClaimExpiresAt)
		require.Equal(t, b.host.Generation, h.Generation)

		// The old code is gone, the new one works, once.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("c1"), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		claimed, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("new"), CredentialHash: hashOf("c1"), Now: base})
		require.NoError(t, err)
		require.Equal(t, b.host.Generation+1, claimed.Generation)

		// A claimed host can be re-keyed with a fresh code.
		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.host.ID, ClaimCodeHash: hashOf("again"), ClaimExpiresAt: base.Add(time.Hour)})
		require.NoError(t, err)
		reclaimed, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("again"), CredentialHash: hashOf("c2"), Now: base.Add(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, hashOf("c2"), reclaimed.CredentialHash)
		require.Equal(t, claimed.Generation+1, reclaimed.Generation)

		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: "nope", ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.other.ID, Now: base})
		require.NoError(t, err)
		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.other.ID, ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound, "deactivated host")
	})

	t.Run("HostHeartbeat", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		sub := json.RawMessage(`{"webhooks":{"github":{"enabled":true,"events":["push"]}}}`)
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.0", Subscription: sub, Now: base.Add(time.Minute)}))
		h, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, ptr(base.Add(time.Minute)), h.LastHeartbeatAt)
		require.Equal(t, "1.0.0", h.AgentVersion)
		require.JSONEq(t, string(sub), string(h.Subscription))

		// A nil subscription leaves the stored one alone.
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.1", Now: base.Add(2 * time.Minute)}))
		h, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, ptr(base.Add(2*time.Minute)), h.LastHeartbeatAt)
		require.Equal(t, "1.0.1", h.AgentVersion)
		require.JSONEq(t, string(sub), string(h.Subscription))

		// A new one replaces it.
		sub2 := json.RawMessage(`{"webhooks":{}}`)
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.1", Subscription: sub2, Now: base.Add(3 * time.Minute)}))
		h, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.JSONEq(t, string(sub2), string(h.Subscription))

		other, err := s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Nil(t, other.LastHeartbeatAt)
		require.Nil(t, other.Subscription)

		err = s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: "nope", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostDeactivate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(time.Hour)
		h, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: now})
		require.NoError(t, err)
		require.Equal(t, store.HostDeactivated, h.Status)
		require.Equal(t, ptr(now), h.DeactivatedAt)
		require.Equal(t, b.host.Generation+1, h.Generation, "deactivating revokes tokens")
		require.Nil(t, h.ClaimCodeHash)

		got, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, h, got)

		other, err := s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, store.HostActive, other.Status)

		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: "nope", Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// --- sources ---

func exerciseSources(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("SourceUpsertGetList", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		p := &store.SourceUpsertParams{
			HostID:   b.host.ID,
			Name:     "github",
			Provider: "github",
			Enabled:  true,
			Events:   []string{"pull_request", "push"},
			Secrets: []store.SealedSecret{
				{Ciphertext: "c1", Fingerprint: "f1"},
				{Ciphertext: "c2", Fingerprint: "f2"},
			},
			Options:      map[string]string{"signature_header": "X-Sig", "encoding": "base64"},
			MaxBodyBytes: 25 << 20,
			Now:          base,
		}
		src, err := s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		want := &store.Source{
			HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true,
			Events: p.Events, Secrets: p.Secrets, Options: p.Options, MaxBodyBytes: 25 << 20,
			CreatedAt: base, UpdatedAt: base,
		}
		require.Equal(t, want, src)
		got, err := s.SourceGet(ctx, b.host.ID, "github")
		require.NoError(t, err)
		require.Equal(t, want, got)

		// Replace: every field follows, created_at stays.
		later := base.Add(time.Hour)
		src, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{
			HostID: b.host.ID, Name: "github", Provider: "generic", Enabled: false,
			Secrets: []store.SealedSecret{{Ciphertext: "c3", Fingerprint: "f3"}}, Now: later,
		})
		require.NoError(t, err)
		require.Equal(t, "generic", src.Provider)
		require.False(t, src.Enabled)
		require.Empty(t, src.Events, "no events: every event")
		require.Equal(t, []store.SealedSecret{{Ciphertext: "c3", Fingerprint: "f3"}}, src.Secrets)
		require.Empty(t, src.Options)
		require.Zero(t, src.MaxBodyBytes)
		require.Equal(t, base, src.CreatedAt)
		require.Equal(t, later, src.UpdatedAt)

		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "stripe", Provider: "stripe", Enabled: true, Now: base})
		require.NoError(t, err)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "billing", Provider: "standard", Enabled: true, Now: base})
		require.NoError(t, err)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.other.ID, Name: "slack", Provider: "slack", Enabled: true, Now: base})
		require.NoError(t, err)

		list, err := s.SourceList(ctx, b.host.ID)
		require.NoError(t, err)
		var names []string
		for _, src := range list {
			names = append(names, src.Name)
		}
		require.Equal(t, []string{"billing", "github", "stripe"}, names)

		_, err = s.SourceGet(ctx, b.host.ID, "slack")
		require.ErrorIs(t, err, store.ErrNotFound, "another host's source")
		_, err = s.SourceGet(ctx, "nope", "github")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: "nope", Name: "github", Provider: "github", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown host")
		list, err = s.SourceList(ctx, "nope")
		require.NoError(t, err)
		require.Empty(t, list)
	})
}

// --- deliveries: insert, get, list, counts ---

func exerciseDeliveries(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryInsertGet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := []byte("{\"a\": 1}\n\x00\xff\xfe not utf-8, trailing spaces  ")
		at := base.Add(987654321 * time.Nanosecond)
		p := insertParams(b.host.ID, "evt-1", at, deliveryOpts{body: body})
		res, err := s.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, store.InsertQueued, res.Outcome)
		d := res.Delivery
		require.Equal(t, p.ID, d.ID)
		require.Equal(t, store.StatusQueued, d.Status)
		require.Zero(t, d.Attempts)
		require.Equal(t, delivery.DefaultRetryPolicy.MaxAttempts(), d.MaxAttempts, "0 means the default policy's")
		require.Equal(t, len(body), d.BodySize)

		got := get(ctx, t, s, b.host.ID, p.ID)
		require.Equal(t, &store.Delivery{
			ID: p.ID, HostID: b.host.ID, Source: "github", EventID: "evt-1",
			EventType: "pull_request", EventAction: "opened",
			Headers: p.Headers, RawBody: body, BodySize: len(body),
			Status: store.StatusQueued, MaxAttempts: 5,
			ReceivedAt: base.Add(987 * time.Millisecond), CorrelationID: "corr-evt-1",
			UpdatedAt: base.Add(987 * time.Millisecond),
		}, got)
		got.RawBody = nil
		require.Equal(t, got, d, "the insert answers what a read gives, body aside")
		sched := insertParams(b.host.ID, "evt-sched", at, deliveryOpts{})
		sched.RetryDelays, sched.Headers = []time.Duration{0, 1500 * time.Microsecond, time.Minute}, nil
		res, err = s.DeliveryInsert(ctx, sched)
		require.NoError(t, err)
		got = get(ctx, t, s, b.host.ID, sched.ID)
		got.RawBody = nil
		require.Equal(t, got, res.Delivery, "with a schedule kept in milliseconds and no headers")

		evs := events(ctx, t, s, p.ID)
		require.Len(t, evs, 1)
		require.Equal(t, p.ID, evs[0].DeliveryID)
		require.Equal(t, base.Add(987*time.Millisecond), evs[0].At)
		require.Equal(t, store.Status(""), evs[0].From)
		require.Equal(t, store.StatusQueued, evs[0].To)
		require.Equal(t, store.TransitionReceive.Reason, evs[0].Reason)
		require.Zero(t, evs[0].Attempt)

		// Isolation: another host cannot see it.
		_, err = s.DeliveryGet(ctx, b.other.ID, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.DeliveryGet(ctx, b.host.ID, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)

		// An empty body is still a body.
		empty := insert(ctx, t, s, b.host.ID, "evt-empty", base, deliveryOpts{body: []byte{}})
		require.Equal(t, []byte{}, get(ctx, t, s, b.host.ID, empty.ID).RawBody)

		_, err = s.DeliveryInsert(ctx, insertParams("nope", "evt-1", base, deliveryOpts{}))
		require.ErrorIs(t, err, store.ErrNotFound, "unknown host")
	})

	t.Run("DeliveryInsertDuplicate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})

		// The provider retries: same event id, later receive time, new delivery id.
		res, err := s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-1", base.Add(time.Minute), deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, store.InsertDuplicate, res.Outcome)
		require.Equal(t, first.ID, res.Delivery.ID, "the first delivery is answered")
		require.Equal(t, store.StatusQueued, res.Delivery.Status)

		// Still a duplicate once acked.
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 1)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base, first.ID))
		res, err = s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-1", base.Add(2*time.Minute), deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, store.InsertDuplicate, res.Outcome)
		require.Equal(t, first.ID, res.Delivery.ID)
		require.Equal(t, store.StatusAcked, res.Delivery.Status)

		// The same event id on another source or another host is another delivery.
		insert(ctx, t, s, b.host.ID, "evt-1", base.Add(time.Minute), deliveryOpts{source: "stripe"})
		insert(ctx, t, s, b.other.ID, "evt-1", base.Add(3*time.Minute), deliveryOpts{})

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, 1, counts[store.StatusAcked])
		require.Equal(t, 1, counts[store.StatusQueued])
		require.Len(t, events(ctx, t, s, first.ID), 3, "duplicates leave no trace in the trail")

	})

	t.Run("DeliveryInsertIDTaken", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		third := createHost(ctx, t, s, "host-3", base)
		// The same event to three hosts under one source name, in one
		// millisecond (a fan-out; Stripe and Svix send one event id to every
		// endpoint): one id, three deliveries. Each is stored, the later ones
		// a millisecond on, and each host sees only its own.
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		second := insert(ctx, t, s, b.other.ID, "evt-1", base, deliveryOpts{})
		last := insert(ctx, t, s, third.ID, "evt-1", base, deliveryOpts{})
		require.Equal(t, deliveryID("github", "evt-1", base), first.ID)
		require.Equal(t, deliveryID("github", "evt-1", base.Add(time.Millisecond)), second.ID)
		require.Equal(t, base.Add(time.Millisecond), second.ReceivedAt, "the id names its receive time")
		require.Equal(t, deliveryID("github", "evt-1", base.Add(2*time.Millisecond)), last.ID)
		for _, d := range []*store.Delivery{first, second, last} {
			got := get(ctx, t, s, d.HostID, d.ID)
			require.Equal(t, d.ReceivedAt, got.ReceivedAt)
			require.Len(t, events(ctx, t, s, d.ID), 1, "one received event")
			require.Equal(t, []string{d.ID}, ids(lease(ctx, t, s, d.HostID, 10, 0, base.Add(time.Second))))
		}
		_, err := s.DeliveryGet(ctx, b.other.ID, first.ID)
		require.ErrorIs(t, err, store.ErrNotFound)

		// The provider's retry is a duplicate of each host's own delivery.
		res, err := s.DeliveryInsert(ctx, insertParams(b.other.ID, "evt-1", base, deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, store.InsertDuplicate, res.Outcome)
		require.Equal(t, second.ID, res.Delivery.ID)
	})

	t.Run("DeliveryInsertRevivesDLQ", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := toDLQ(ctx, t, s, b.host.ID, "evt-1", base)
		require.Equal(t, 1, d.Attempts)
		require.NotNil(t, d.DLQAt)

		now := base.Add(time.Hour)
		res, err := s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-1", now, deliveryOpts{}))
		require.NoError(t, err)
		require.Equal(t, store.InsertRevived, res.Outcome)
		require.Equal(t, d.ID, res.Delivery.ID)
		require.Equal(t, store.StatusQueued, res.Delivery.Status)
		require.Zero(t, res.Delivery.Attempts)
		require.Nil(t, res.Delivery.NextRetryAt)
		require.Nil(t, res.Delivery.DLQAt)

		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusDLQ, ev.From)
		require.Equal(t, store.StatusQueued, ev.To)
		require.Equal(t, store.TransitionRevive.Reason, ev.Reason)
		require.Zero(t, ev.Attempt)
		require.Equal(t, now, ev.At)

		// It is handed out again, as a first attempt.
		leased := lease(ctx, t, s, b.host.ID, 10, 0, now)
		require.Equal(t, []string{d.ID}, ids(leased))
		require.Equal(t, 1, leased[0].Attempts)
	})

	t.Run("DeliveryListAndCount", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var all []*store.Delivery // oldest first
		for i := range 10 {
			source := "github"
			if i%3 == 0 {
				source = "stripe"
			}
			at := base.Add(time.Duration(i) * time.Second)
			if i == 5 {
				at = base.Add(4 * time.Second) // a tie on received_at, broken by id
			}
			all = append(all, insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%02d", i), at, deliveryOpts{source: source}))
		}
		insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})

		// Move a few along: 0..2 leased, then 0 acked and 1 dead-lettered.
		require.Len(t, lease(ctx, t, s, b.host.ID, 3, 0, base.Add(time.Minute)), 3)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, base.Add(time.Minute), all[0].ID))
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base.Add(time.Minute), delivery.Nack{ID: all[1].ID, Error: "bad", Retryable: false}))

		newestFirst := slices.Clone(all)
		slices.SortFunc(newestFirst, func(x, y *store.Delivery) int {
			if c := y.ReceivedAt.Compare(x.ReceivedAt); c != 0 {
				return c
			}
			if x.ID > y.ID {
				return -1
			}
			return 1
		})

		list, err := s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Equal(t, ids(newestFirst), ids(list), "newest first, other hosts excluded")
		for _, d := range list {
			require.Nil(t, d.RawBody, "lists carry no bodies")
			require.NotZero(t, d.BodySize)
		}

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Status: store.StatusDelivering})
		require.NoError(t, err)
		require.Equal(t, []string{all[2].ID}, ids(list))

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Source: "stripe"})
		require.NoError(t, err)
		require.Equal(t, []string{all[9].ID, all[6].ID, all[3].ID, all[0].ID}, ids(list))

		list, err = s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Source: "stripe", Status: store.StatusQueued})
		require.NoError(t, err)
		require.Equal(t, []string{all[9].ID, all[6].ID, all[3].ID}, ids(list))

		// Keyset paging: pages of 3 cover everything once, in order.
		var paged []string
		p := &store.DeliveryListParams{HostID: b.host.ID, Limit: 3}
		for range 10 {
			page, err := s.DeliveryList(ctx, p)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), 3)
			if len(page) == 0 {
				break
			}
			paged = append(paged, ids(page)...)
			last := page[len(page)-1]
			p.BeforeReceivedAt, p.BeforeID = ptr(last.ReceivedAt), last.ID
		}
		require.Equal(t, ids(newestFirst), paged, "no overlap, no gaps")

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, map[store.Status]int{
			store.StatusQueued: 7, store.StatusDelivering: 1, store.StatusDelivered: 0,
			store.StatusAcked: 1, store.StatusRetrying: 0, store.StatusDLQ: 1,
		}, counts)

		counts, err = s.DeliveryCountByStatus(ctx, "nope")
		require.NoError(t, err)
		for _, st := range store.Statuses {
			require.Zero(t, counts[st])
		}
	})
}

// --- leasing ---

func exerciseLease(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseFIFO", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Inserted newest first; leased oldest first.
		var want []string
		for i := 4; i >= 0; i-- {
			d := insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{})
			want = append([]string{d.ID}, want...)
		}
		insert(ctx, t, s, b.other.ID, "evt-other", base.Add(-time.Hour), deliveryOpts{})

		now := base.Add(time.Minute)
		first := lease(ctx, t, s, b.host.ID, 3, 0, now)
		require.Equal(t, want[:3], ids(first))
		for _, d := range first {
			require.Equal(t, b.host.ID, d.HostID)
			require.Equal(t, store.StatusDelivering, d.Status)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, ptr(now.Add(leaseFor)), d.LeaseExpiresAt)
			require.Equal(t, []byte(`{"event":"`+d.EventID+`"}`), d.RawBody, "leased deliveries carry their body")
			require.Equal(t, "pull_request", d.Headers["x-github-event"])
			require.Equal(t, d, get(ctx, t, s, b.host.ID, d.ID))

			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, store.StatusQueued, ev.From)
			require.Equal(t, store.StatusDelivering, ev.To)
			require.Equal(t, store.TransitionLease.Reason, ev.Reason)
			require.Equal(t, 1, ev.Attempt)
			require.Equal(t, now, ev.At)
		}
		require.Equal(t, want[3:], ids(lease(ctx, t, s, b.host.ID, 3, 0, now)))
		require.Empty(t, lease(ctx, t, s, b.host.ID, 3, 0, now), "leased ones are not handed out again")

		other := lease(ctx, t, s, b.other.ID, 10, 0, now)
		require.Len(t, other, 1, "the other host's deliveries were never leased to host a")
	})

	t.Run("LeaseBounds", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := func(n int) []byte { return []byte(fmt.Sprintf("%0*d", n, n)) }
		sizes := []int{10, 10, 10, 100, 10, 10}
		var all []string
		for i, n := range sizes {
			all = append(all, insert(ctx, t, s, b.host.ID, fmt.Sprintf("evt-%d", i), base.Add(time.Duration(i)*time.Second), deliveryOpts{body: body(n)}).ID)
		}
		now := base.Add(time.Minute)
		require.Equal(t, all[0:2], ids(lease(ctx, t, s, b.host.ID, 10, 20, now)), "byte bound, inclusive")
		require.Equal(t, all[2:3], ids(lease(ctx, t, s, b.host.ID, 10, 50, now)), "FIFO: stops at the first that does not fit")
		require.Equal(t, all[3:4], ids(lease(ctx, t, s, b.host.ID, 10, 50, now)), "a larger one goes alone")
		require.Equal(t, all[4:5], ids(lease(ctx, t, s, b.host.ID, 1, 1000, now)), "count bound")
		require.Equal(t, all[5:6], ids(lease(ctx, t, s, b.host.ID, 10, 0, now)), "no byte bound")
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, now))
	})

	t.Run("LeaseRetrying", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 10, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "503", Retryable: true}))
		due := base.Add(delivery.DefaultRetryPolicy.Delays[1])
		require.Equal(t, ptr(due), get(ctx, t, s, b.host.ID, d.ID).NextRetryAt)

		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, due.Add(-time.Millisecond)), "not due yet")
		leased := lease(ctx, t, s, b.host.ID, 10, 0, due)
		require.Equal(t, []string{d.ID}, ids(leased), "due")
		require.Equal(t, 2, leased[0].Attempts)
		require.Nil(t, leased[0].NextRetryAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusRetrying, ev.From)
		require.Equal(t, store.StatusDelivering, ev.To)
		require.Equal(t, 2, ev.Attempt)
	})

	t.Run("MarkDelivered", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		d2 := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		o1 := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		now := base.Add(time.Second)
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d1.ID, d2.ID, o1.ID, "nope"}, Now: now})
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the host's leased delivery")
		got := get(ctx, t, s, b.host.ID, d1.ID)
		require.Equal(t, store.StatusDelivered, got.Status)
		require.Equal(t, ptr(now), got.DeliveredAt)
		require.Equal(t, ptr(base.Add(leaseFor)), got.LeaseExpiresAt, "still under lease until acked")
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, d2.ID).Status)
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, o1.ID).Status)

		ev := lastEvent(ctx, t, s, d1.ID)
		require.Equal(t, store.StatusDelivering, ev.From)
		require.Equal(t, store.StatusDelivered, ev.To)
		require.Equal(t, store.TransitionDelivered.Reason, ev.Reason)
		require.Equal(t, 1, ev.Attempt)

		n, err = s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d1.ID}, Now: now})
		require.NoError(t, err)
		require.Zero(t, n, "already delivered")
	})

	t.Run("ReleaseUnwritten", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		second := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		written := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		last := insert(ctx, t, s, b.host.ID, "evt-4", base.Add(3*time.Second), deliveryOpts{maxAttempts: 1})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 2, 0, base), 2)
		require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		// The answer carrying first, second and last was not written. Only
		// the caller's count, only while delivering.
		now := base.Add(time.Second)
		n, err := s.DeliveryRelease(ctx, delivery.ReleaseParams(b.host.ID, []string{first.ID, second.ID, written.ID, last.ID, o.ID, "unknown"}, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, d := range []*store.Delivery{first, second} {
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, store.StatusRetrying, got.Status, d.ID)
			require.Equal(t, 1, got.Attempts, "the attempt counts")
			require.Equal(t, ptr(now), got.NextRetryAt, "due at once: the handler never ran")
			require.Nil(t, got.LeaseExpiresAt, d.ID)
			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, store.StatusDelivering, ev.From)
			require.Equal(t, store.StatusRetrying, ev.To)
			require.Equal(t, store.TransitionRelease.Reason, ev.Reason)
			require.Equal(t, 1, ev.Attempt)
		}
		// Out of attempts, it is dead-lettered: an answer that can never be
		// written does not hold its host's queue forever.
		got := get(ctx, t, s, b.host.ID, last.ID)
		require.Equal(t, store.StatusDLQ, got.Status)
		require.Equal(t, store.TransitionRelease.Reason+": attempts exhausted, dead-lettered", lastEvent(ctx, t, s, last.ID).Reason)
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, written.ID).Status, "handed out: not released")
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, o.ID).Status, "another host's: untouched")

		// Available at once, in their order, as second attempts.
		again := lease(ctx, t, s, b.host.ID, 10, 0, now)
		require.Equal(t, []string{first.ID, second.ID}, ids(again))
		require.Equal(t, 2, again[0].Attempts)
	})
}

func exerciseReleaseUnheld(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ReleaseUnheld", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		unwritten := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		lost := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		held := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 2, 0, base), 2)
		queued := insert(ctx, t, s, b.host.ID, "evt-4", base.Add(3*time.Second), deliveryOpts{})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.other.ID, 1, 0, base), 1)

		// The host lost an answer and holds only evt-3.
		now := base.Add(time.Minute)
		n, err := s.DeliveryReleaseUnheld(ctx, delivery.ReleaseUnheldParams(b.host.ID, []string{held.ID, "unknown"}, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, d := range []*store.Delivery{unwritten, lost} {
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, store.StatusRetrying, got.Status, d.ID)
			require.Equal(t, 1, got.Attempts, d.ID)
			require.Equal(t, ptr(now), got.NextRetryAt, "due at once")
			require.Equal(t, store.TransitionAnswerLost.Reason, lastEvent(ctx, t, s, d.ID).Reason)
		}
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, held.ID).Status, "held")
		require.Equal(t, store.StatusQueued, get(ctx, t, s, b.host.ID, queued.ID).Status, "not leased")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.other.ID, o.ID).Status, "another host's")
		require.Equal(t, []string{unwritten.ID, lost.ID, queued.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, now)))

		// Holding nothing: everything leased to it.
		n, err = s.DeliveryReleaseUnheld(ctx, delivery.ReleaseUnheldParams(b.host.ID, nil, delivery.RetryPolicy{}, now))
		require.NoError(t, err)
		require.Equal(t, 4, n)
	})
}

// --- acks, nacks, extends ---

func exerciseAckNack(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("Ack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// One delivery in each ackable state.
		delivering := insert(ctx, t, s, b.host.ID, "evt-delivering", base, deliveryOpts{})
		delivered := insert(ctx, t, s, b.host.ID, "evt-delivered", base.Add(1*time.Millisecond), deliveryOpts{})
		retrying := insert(ctx, t, s, b.host.ID, "evt-retrying", base.Add(2*time.Millisecond), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 3, 0, base), 3)
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{delivered.ID}, Now: base})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: retrying.ID, Error: "x", Retryable: true}))
		dlq := toDLQ(ctx, t, s, b.host.ID, "evt-dlq", base.Add(3*time.Millisecond))
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Hour), deliveryOpts{})
		other := insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		before := map[string]store.Status{}
		for _, d := range []*store.Delivery{delivering, delivered, retrying, dlq, queued} {
			before[d.ID] = get(ctx, t, s, b.host.ID, d.ID).Status
		}

		// Another host's ack changes nothing.
		require.Zero(t, ack(ctx, t, s, b.other.ID, base, delivering.ID, delivered.ID))
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.host.ID, delivering.ID).Status)

		now := base.Add(time.Second)
		require.Equal(t, 4, ack(ctx, t, s, b.host.ID, now, delivering.ID, delivered.ID, retrying.ID, dlq.ID, queued.ID, other.ID, "unknown"))
		// A queued delivery was never handed out: an ack of it is stale.
		got := get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status)
		require.Nil(t, got.AckedAt)
		require.Len(t, events(ctx, t, s, queued.ID), 1)
		delete(before, queued.ID)
		for id, from := range before {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			require.Equal(t, ptr(now), d.AckedAt, id)
			require.Nil(t, d.LeaseExpiresAt, id)
			require.Nil(t, d.NextRetryAt, id)
			ev := lastEvent(ctx, t, s, id)
			require.Equal(t, from, ev.From, id)
			require.Equal(t, store.StatusAcked, ev.To, id)
			require.Equal(t, store.TransitionAck.Reason, ev.Reason, id)
			require.Equal(t, d.Attempts, ev.Attempt, id)
			require.Equal(t, now, ev.At, id)
		}
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.other.ID, other.ID).Status, "other host's delivery untouched")

		// Acking again changes nothing and records nothing.
		trail := len(events(ctx, t, s, delivering.ID))
		require.Zero(t, ack(ctx, t, s, b.host.ID, now.Add(time.Second), delivering.ID))
		require.Len(t, events(ctx, t, s, delivering.ID), trail)
		require.Equal(t, ptr(now), get(ctx, t, s, b.host.ID, delivering.ID).AckedAt)
		require.Zero(t, ack(ctx, t, s, b.host.ID, now))
	})

	t.Run("AckRecordsWhatWasWrittenDelivered", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Written to the host and not yet marked delivered: one at each of
		// two times; one marked already; one whose lease expired
		// (retrying); one written and not acked.
		early := insert(ctx, t, s, b.host.ID, "evt-early", base, deliveryOpts{})
		late := insert(ctx, t, s, b.host.ID, "evt-late", base.Add(1*time.Millisecond), deliveryOpts{})
		marked := insert(ctx, t, s, b.host.ID, "evt-marked", base.Add(2*time.Millisecond), deliveryOpts{})
		retrying := insert(ctx, t, s, b.host.ID, "evt-retrying", base.Add(3*time.Millisecond), deliveryOpts{})
		unacked := insert(ctx, t, s, b.host.ID, "evt-unacked", base.Add(4*time.Millisecond), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 5, 0, base), 5)
		markedAt, earlyAt, lateAt := base.Add(10*time.Millisecond), base.Add(20*time.Millisecond), base.Add(30*time.Millisecond)
		n, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{marked.ID}, Now: markedAt})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: retrying.ID, Error: "x", Retryable: true}))
		trails := map[string][]store.DeliveryEvent{}
		for _, d := range []*store.Delivery{early, late, marked, retrying, unacked} {
			trails[d.ID] = eventsButIdentity(events(ctx, t, s, d.ID))
		}

		now := base.Add(time.Second)
		written := []store.Written{
			{ID: early.ID, At: earlyAt}, {ID: marked.ID, At: earlyAt}, {ID: retrying.ID, At: earlyAt},
			{ID: late.ID, At: lateAt}, {ID: unacked.ID, At: lateAt},
		}
		n, err = s.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{early.ID, late.ID, marked.ID, retrying.ID}, Written: written, Now: now})
		require.NoError(t, err)
		require.Equal(t, 4, n)

		for id, at := range map[string]time.Time{early.ID: earlyAt, late.ID: lateAt} {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			require.Equal(t, ptr(at), d.DeliveredAt, "delivered when written")
			require.Equal(t, ptr(now), d.AckedAt, id)
			want := append(trails[id],
				store.DeliveryEvent{At: at, From: store.StatusDelivering, To: store.StatusDelivered, Reason: store.TransitionDelivered.Reason, Attempt: 1},
				store.DeliveryEvent{At: now, From: store.StatusDelivered, To: store.StatusAcked, Reason: store.TransitionAck.Reason, Attempt: 1})
			require.Equal(t, want, eventsButIdentity(events(ctx, t, s, id)), id)
		}
		// Marked already, or no longer delivering: acked as ever.
		for id, from := range map[string]store.Status{marked.ID: store.StatusDelivered, retrying.ID: store.StatusRetrying} {
			d := get(ctx, t, s, b.host.ID, id)
			require.Equal(t, store.StatusAcked, d.Status, id)
			want := append(trails[id], store.DeliveryEvent{At: now, From: from, To: store.StatusAcked, Reason: store.TransitionAck.Reason, Attempt: d.Attempts})
			require.Equal(t, want, eventsButIdentity(events(ctx, t, s, id)), id)
		}
		require.Equal(t, ptr(markedAt), get(ctx, t, s, b.host.ID, marked.ID).DeliveredAt)
		// Written but not acked here: left to its own mark.
		d := get(ctx, t, s, b.host.ID, unacked.ID)
		require.Equal(t, store.StatusDelivering, d.Status)
		require.Nil(t, d.DeliveredAt)
		require.Equal(t, trails[unacked.ID], eventsButIdentity(events(ctx, t, s, unacked.ID)))
	})

	t.Run("AckAfterLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, base), 1)
		late := base.Add(leaseFor + time.Minute)
		n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, 0, late))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, store.StatusRetrying, get(ctx, t, s, b.host.ID, d.ID).Status)

		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, late, d.ID), "a late ack still counts")
		require.Equal(t, store.StatusAcked, get(ctx, t, s, b.host.ID, d.ID).Status)
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, late.Add(time.Hour)), "an acked delivery is never handed out again")
	})

	t.Run("NackSchedule", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		policy := delivery.DefaultRetryPolicy
		now := base
		for attempt := 1; attempt <= policy.MaxAttempts(); attempt++ {
			leased := lease(ctx, t, s, b.host.ID, 10, 0, now)
			require.Equal(t, []string{d.ID}, ids(leased), "attempt %d", attempt)
			require.Equal(t, attempt, leased[0].Attempts)
			// Delivered or not, a leased delivery can be nacked.
			if attempt%2 == 0 {
				_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: now})
				require.NoError(t, err)
			}
			msg := fmt.Sprintf("failure %d", attempt)
			require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: msg, Retryable: true}))
			got := get(ctx, t, s, b.host.ID, d.ID)
			require.Equal(t, msg, got.LastError)
			require.Nil(t, got.LeaseExpiresAt)
			ev := lastEvent(ctx, t, s, d.ID)
			require.Equal(t, attempt, ev.Attempt)
			require.Equal(t, now, ev.At)
			if attempt < policy.MaxAttempts() {
				require.Equal(t, store.StatusRetrying, got.Status, "attempt %d", attempt)
				require.Equal(t, ptr(now.Add(policy.Delays[attempt])), got.NextRetryAt, "attempt %d", attempt)
				require.Nil(t, got.DLQAt)
				require.Equal(t, store.TransitionNack.Reason, ev.Reason)
				require.Equal(t, store.StatusRetrying, ev.To)
				now = *got.NextRetryAt
				continue
			}
			require.Equal(t, store.StatusDLQ, got.Status, "after the fifth failure")
			require.Nil(t, got.NextRetryAt)
			require.Equal(t, ptr(now), got.DLQAt)
			require.Equal(t, store.StatusDLQ, ev.To)
			require.Contains(t, ev.Reason, store.TransitionNack.Reason)
		}
		require.Empty(t, lease(ctx, t, s, b.host.ID, 10, 0, now.Add(24*time.Hour)), "dead letters are not leased")
	})

	t.Run("NackNotRetryable", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "400 bad request", Retryable: false}))
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusDLQ, got.Status, "at once")
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, "400 bad request", got.LastError)
		require.Equal(t, ptr(base), got.DLQAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusDelivering, ev.From)
		require.Equal(t, store.StatusDLQ, ev.To)
	})

	t.Run("NackMaxAttempts", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{maxAttempts: 2})
		require.Equal(t, 2, d.MaxAttempts)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: d.ID, Error: "x", Retryable: true}))
		now := *get(ctx, t, s, b.host.ID, d.ID).NextRetryAt
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, now), 1)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, now, delivery.Nack{ID: d.ID, Error: "x", Retryable: true}))
		require.Equal(t, store.StatusDLQ, get(ctx, t, s, b.host.ID, d.ID).Status, "the delivery's own max_attempts")
	})

	t.Run("NackIgnored", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		leased := insert(ctx, t, s, b.host.ID, "evt-leased", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(time.Second), deliveryOpts{})

		// Another host's nack changes nothing.
		require.Zero(t, nack(ctx, t, s, b.other.ID, base, delivery.Nack{ID: leased.ID, Error: "x", Retryable: false}))
		require.Equal(t, store.StatusDelivering, get(ctx, t, s, b.host.ID, leased.ID).Status)
		// A nack of a delivery that is not leased changes nothing.
		require.Zero(t, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: queued.ID, Error: "x", Retryable: false}, delivery.Nack{ID: "unknown", Error: "x"}))
		got := get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status)
		require.Empty(t, got.LastError)
		// A nack after the failure was counted changes nothing either.
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: leased.ID, Error: "first", Retryable: true}))
		require.Zero(t, nack(ctx, t, s, b.host.ID, base, delivery.Nack{ID: leased.ID, Error: "second", Retryable: false}))
		got = get(ctx, t, s, b.host.ID, leased.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, "first", got.LastError)
		require.Equal(t, 1, got.Attempts)
		require.Len(t, events(ctx, t, s, queued.ID), 1)
	})

	t.Run("Extend", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		d2 := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 2, 0, base), 2)
		queued := insert(ctx, t, s, b.host.ID, "evt-3", base.Add(2*time.Second), deliveryOpts{})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.other.ID, 1, 0, base), 1)

		now := base.Add(4 * time.Minute)
		n, err := s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d1.ID, queued.ID, o.ID, "unknown"}, LeaseFor: 10 * time.Minute, Now: now})
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the caller's leased ones")
		got := get(ctx, t, s, b.host.ID, d1.ID)
		require.Equal(t, store.StatusDelivered, got.Status)
		require.Equal(t, 1, got.Attempts, "extending is not an attempt")
		require.Equal(t, ptr(now.Add(10*time.Minute)), got.LeaseExpiresAt)
		require.Equal(t, ptr(base.Add(leaseFor)), get(ctx, t, s, b.host.ID, d2.ID).LeaseExpiresAt)
		require.Nil(t, get(ctx, t, s, b.host.ID, queued.ID).LeaseExpiresAt)
		require.Equal(t, ptr(base.Add(leaseFor)), get(ctx, t, s, b.other.ID, o.ID).LeaseExpiresAt)
		ev := lastEvent(ctx, t, s, d1.ID)
		require.Equal(t, store.StatusDelivered, ev.From)
		require.Equal(t, store.StatusDelivered, ev.To)
		require.Equal(t, store.TransitionExtend.Reason, ev.Reason)

		// Past the original lease: the extended one lives on, the other expires.
		n, err = s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, 0, base.Add(leaseFor+time.Minute)))
		require.NoError(t, err)
		require.Equal(t, 2, n, "d2 and the other host's")
		require.Equal(t, store.StatusDelivered, get(ctx, t, s, b.host.ID, d1.ID).Status)
		require.Equal(t, store.StatusRetrying, get(ctx, t, s, b.host.ID, d2.ID).Status)
		// The other host's answer was never written: due again at once.
		got = get(ctx, t, s, b.other.ID, o.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, ptr(base.Add(leaseFor+time.Minute)), got.NextRetryAt)
		require.Equal(t, []string{queued.ID}, ids(lease(ctx, t, s, b.host.ID, 10, 0, base.Add(leaseFor+time.Minute))),
			"d1 still leased, d2 not due yet")

		n, err = s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d2.ID}, LeaseFor: time.Hour, Now: now})
		require.NoError(t, err)
		require.Zero(t, n, "a retrying delivery has no lease to extend")
	})
}

// --- lease expiry ---

func exerciseExpiry(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("ExpireLeases", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		early := insert(ctx, t, s, b.host.ID, "evt-early", base, deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base), 1)
		delivered := insert(ctx, t, s, b.host.ID, "evt-delivered", base.Add(time.Second), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base.Add(time.Second)), 1)
		_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{delivered.ID}, Now: base.Add(time.Second)})
		require.NoError(t, err)
		valid := insert(ctx, t, s, b.host.ID, "evt-valid", base.Add(2*time.Second), deliveryOpts{})
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, base.Add(time.Hour)), 1)
		queued := insert(ctx, t, s, b.host.ID, "evt-queued", base.Add(3*time.Second), deliveryOpts{})

		expire := func(now time.Time, limit int) int {
			n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.DefaultRetryPolicy, limit, now))
			require.NoError(t, err)
			return n
		}
		require.Zero(t, expire(base.Add(leaseFor), 0), "a lease ending exactly now has not ended before now")

		now := base.Add(leaseFor + 2*time.Second)
		require.Equal(t, 1, expire(now, 1), "limit")
		require.Equal(t, 1, expire(now, 1))
		require.Zero(t, expire(now, 1))

		// A lease whose answer was written is a failed attempt.
		got := get(ctx, t, s, b.host.ID, delivered.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, ptr(now.Add(delivery.DefaultRetryPolicy.Delays[1])), got.NextRetryAt)
		require.Nil(t, got.LeaseExpiresAt)
		require.NotEmpty(t, got.LastError)
		requireLastEvent(ctx, t, s, store.DeliveryEvent{DeliveryID: delivered.ID, At: now,
			From: store.StatusDelivered, To: store.StatusRetrying, Reason: store.TransitionExpire.Reason, Attempt: 1})

		// One whose answer was never written (the cloud stopped between
		// leasing and answering) never reached its handler: the attempt
		// counts, but it is due again at once.
		got = get(ctx, t, s, b.host.ID, early.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, ptr(now), got.NextRetryAt)
		require.Nil(t, got.LeaseExpiresAt)
		requireLastEvent(ctx, t, s, store.DeliveryEvent{DeliveryID: early.ID, At: now,
			From: store.StatusDelivering, To: store.StatusRetrying, Reason: store.TransitionExpireUnwritten.Reason, Attempt: 1})

		got = get(ctx, t, s, b.host.ID, valid.ID)
		require.Equal(t, store.StatusDelivering, got.Status, "a valid lease is untouched")
		require.Equal(t, 1, got.Attempts)
		got = get(ctx, t, s, b.host.ID, queued.ID)
		require.Equal(t, store.StatusQueued, got.Status, "an offline host burns no attempts")
		require.Zero(t, got.Attempts)
	})

	t.Run("ExpireLeasesToDLQ", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{maxAttempts: 2})
		now := base
		for attempt := 1; attempt <= 2; attempt++ {
			require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, now), 1)
			now = now.Add(leaseFor + time.Millisecond)
			n, err := s.DeliveryExpireLeases(ctx, delivery.ExpireLeasesParams(delivery.RetryPolicy{}, 0, now)) // zero policy: the default
			require.NoError(t, err)
			require.Equal(t, 1, n)
			if attempt == 1 {
				got := get(ctx, t, s, b.host.ID, d.ID)
				require.Equal(t, store.StatusRetrying, got.Status)
				now = *got.NextRetryAt
			}
		}
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusDLQ, got.Status)
		require.Equal(t, ptr(now), got.DLQAt)
		ev := lastEvent(ctx, t, s, d.ID)
		require.Equal(t, store.StatusDLQ, ev.To)
		require.Contains(t, ev.Reason, store.TransitionExpire.Reason)
	})
}

// --- audit trail ---

func exerciseAudit(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("AuditTrail", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		t1, t2, t3, t4, t5, t6 := base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second),
			base.Add(3*time.Second+delivery.DefaultRetryPolicy.Delays[1]), base.Add(time.Hour), base.Add(2*time.Hour)
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, t1), 1)
		_, err := s.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: t2})
		require.NoError(t, err)
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, t3, delivery.Nack{ID: d.ID, Error: "503", Retryable: true}))
		require.Len(t, lease(ctx, t, s, b.host.ID, 1, 0, t4), 1)
		_, err = s.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: b.host.ID, IDs: []string{d.ID}, LeaseFor: time.Hour, Now: t4})
		require.NoError(t, err)
		require.Equal(t, 1, ack(ctx, t, s, b.host.ID, t5, d.ID))
		// A second delivery of another host interleaves; it must not show up.
		insert(ctx, t, s, b.other.ID, "evt-x", t6, deliveryOpts{})

		type row struct {
			At       time.Time
			From, To store.Status
			Reason   string
			Attempt  int
		}
		var got []row
		var lastID int64
		for _, ev := range events(ctx, t, s, d.ID) {
			require.Equal(t, d.ID, ev.DeliveryID)
			require.Greater(t, ev.ID, lastID, "oldest first")
			lastID = ev.ID
			got = append(got, row{ev.At, ev.From, ev.To, ev.Reason, ev.Attempt})
		}
		require.Equal(t, []row{
			{base, "", store.StatusQueued, store.TransitionReceive.Reason, 0},
			{t1, store.StatusQueued, store.StatusDelivering, store.TransitionLease.Reason, 1},
			{t2, store.StatusDelivering, store.StatusDelivered, store.TransitionDelivered.Reason, 1},
			{t3, store.StatusDelivered, store.StatusRetrying, store.TransitionNack.Reason, 1},
			{t4, store.StatusRetrying, store.StatusDelivering, store.TransitionLease.Reason, 2},
			{t4, store.StatusDelivering, store.StatusDelivering, store.TransitionExtend.Reason, 2},
			{t5, store.StatusDelivering, store.StatusAcked, store.TransitionAck.Reason, 2},
		}, got)

		evs, err := s.DeliveryEventList(ctx, "unknown")
		require.NoError(t, err)
		require.Empty(t, evs)
	})
}

// --- concurrency ---

func exerciseConcurrency(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("LeaseConcurrently", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const total, workers = 2000, 8
		want := make(map[string]bool, total)
		// Insert from a few goroutines too: inserts must not collide either.
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, total)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < total; i += 4 {
					p := insertParams(b.host.ID, fmt.Sprintf("evt-%04d", i), base.Add(time.Duration(i)*time.Millisecond), deliveryOpts{})
					res, err := s.DeliveryInsert(ctx, p)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					want[res.Delivery.ID] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, want, total)
		insert(ctx, t, s, b.other.ID, "evt-other", base, deliveryOpts{})

		// All leases are taken at the same instant and stay valid, so no
		// delivery may be handed out twice.
		now := base.Add(time.Hour)
		got := make(map[string]int, total)
		var batches int
		errs = make(chan error, total+workers)
		for range workers {
			wg.Go(func() {
				for {
					res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: b.host.ID, Max: 7, MaxBytes: 1 << 20, LeaseFor: time.Hour, Now: now})
					if err != nil {
						errs <- err
						return
					}
					ds := res.Deliveries
					if len(ds) == 0 {
						return
					}
					mu.Lock()
					batches++
					if len(ds) > 7 {
						errs <- fmt.Errorf("a batch of %d over Max 7", len(ds))
					}
					for _, d := range ds {
						got[d.ID]++
						if d.HostID != b.host.ID {
							errs <- fmt.Errorf("leased %s of host %s", d.ID, d.HostID)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, got, total)
		for id, n := range got {
			require.True(t, want[id], id)
			require.Equal(t, 1, n, "%s leased %d times", id, n)
		}
		require.GreaterOrEqual(t, batches, total/7, "no batch over Max")

		counts, err := s.DeliveryCountByStatus(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, total, counts[store.StatusDelivering])
		require.Empty(t, lease(ctx, t, s, b.host.ID, 100, 0, now))
		other, err := s.DeliveryCountByStatus(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, 1, other[store.StatusQueued])
	})
}

// listen runs s.DeliveryListen with p until stop is called or the test
// ends, and returns once it listens (p.Listening is its own); stop ends it
// and returns what DeliveryListen returned.
func listen(ctx context.Context, t testing.TB, s store.Store, p *store.DeliveryListenParams) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	done := make(chan error, 1)
	p.Listening = func() { close(listening) }
	go func() { done <- s.DeliveryListen(ctx, p) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() })
	select {
	case <-listening:
	case <-done:
		t.Fatal("DeliveryListen ended before it listened")
	}
	return stop
}
