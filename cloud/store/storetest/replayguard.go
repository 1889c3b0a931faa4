package storetest

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// exerciseReplayGuard covers what the replay guard stores: the body digest
// of guarded deliveries and the lookup by it, and the quarantine's kinds.
func exerciseReplayGuard(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryByDigest", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := []byte(`{"action":"opened","number":7}`)
		sum := sha256.Sum256(body)
		digest := sum[:]
		guarded := func(eventID string, at time.Time, o deliveryOpts) *store.DeliveryInsertParams {
			o.body = body
			p := insertParams(b.host.ID, eventID, at, o)
			p.BodyDigest = digest
			return p
		}
		lookup := func(hostID, source, eventID string, since time.Time) (*store.DigestMatch, error) {
			return s.DeliveryByDigest(ctx, &store.DigestLookupParams{
				HostID: hostID, Source: source, Digest: digest, Since: since, EventID: eventID})
		}

		_, err := lookup(b.host.ID, "github", "evt-new", base.Add(-time.Hour))
		require.ErrorIs(t, err, store.ErrNotFound, "nothing stored yet")

		// The same body unguarded (no digest) is not found.
		unguarded := insertParams(b.host.ID, "evt-plain", base, deliveryOpts{body: body})
		_, err = s.DeliveryInsert(ctx, unguarded)
		require.NoError(t, err)
		_, err = lookup(b.host.ID, "github", "evt-new", base.Add(-time.Hour))
		require.ErrorIs(t, err, store.ErrNotFound, "only deliveries stored with a digest")

		first := guarded("evt-1", base.Add(time.Second), deliveryOpts{})
		_, err = s.DeliveryInsert(ctx, first)
		require.NoError(t, err)
		// The second through a batch, as group commit writes them.
		second := guarded("evt-2", base.Add(2*time.Second), deliveryOpts{})
		res, err := s.DeliveryInsertBatch(ctx, []*store.DeliveryInsertParams{second})
		require.NoError(t, err)
		require.Equal(t, store.InsertQueued, res[0].Outcome)

		m, err := lookup(b.host.ID, "github", "evt-new", base.Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, store.DigestMatch{DeliveryID: second.ID, EventID: "evt-2", ReceivedAt: base.Add(2 * time.Second)}, *m,
			"the latest, for another event")
		m, err = lookup(b.host.ID, "github", "evt-1", base.Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, first.ID, m.DeliveryID, "the event's own delivery first: a provider's retry")
		m, err = lookup(b.host.ID, "github", "evt-new", base.Add(1500*time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, "evt-2", m.EventID)
		_, err = lookup(b.host.ID, "github", "evt-new", base.Add(3*time.Second))
		require.ErrorIs(t, err, store.ErrNotFound, "received before the window")
		_, err = lookup(b.host.ID, "stripe", "evt-new", base.Add(-time.Hour))
		require.ErrorIs(t, err, store.ErrNotFound, "another source")
		_, err = lookup(b.other.ID, "github", "evt-new", base.Add(-time.Hour))
		require.ErrorIs(t, err, store.ErrNotFound, "another host")
	})

	t.Run("QuarantineKinds", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		q := store.QuarantinedRequest{HostID: b.host.ID, Source: "github", URL: "https://relay.example/x",
			Header: map[string][]string{"X-Github-Delivery": {"d-2"}}, Body: []byte("{}"), ClientIP: "198.51.100.1", ReceivedAt: base}
		secret, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q})
		require.NoError(t, err)
		require.Equal(t, store.QuarantineSecret, secret.Kind, "a kind-less insert waits for a key")
		replay := q
		replay.Kind, replay.Reason = store.QuarantineReplay, "suspected replay of github:d-1:1"
		held, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: replay, MaxRows: 2})
		require.NoError(t, err)
		require.Equal(t, store.QuarantineReplay, held.Kind)
		_, err = s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: replay, MaxRows: 2})
		require.ErrorIs(t, err, store.ErrQuarantineFull, "held replays count against the same bounds")

		all, err := s.QuarantineList(ctx, &store.QuarantineListParams{})
		require.NoError(t, err)
		require.Len(t, all, 2)
		secrets, err := s.QuarantineList(ctx, &store.QuarantineListParams{Kind: store.QuarantineSecret})
		require.NoError(t, err)
		require.Len(t, secrets, 1)
		require.Equal(t, secret.ID, secrets[0].ID)
		replays, err := s.QuarantineList(ctx, &store.QuarantineListParams{Kind: store.QuarantineReplay})
		require.NoError(t, err)
		require.Len(t, replays, 1)
		require.Equal(t, "suspected replay of github:d-1:1", replays[0].Reason)

		got, err := s.QuarantineGet(ctx, held.ID)
		require.NoError(t, err)
		require.Equal(t, held, got)
		require.Equal(t, q.Body, got.Body)
		require.NoError(t, s.QuarantineDelete(ctx, held.ID))
		_, err = s.QuarantineGet(ctx, held.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
