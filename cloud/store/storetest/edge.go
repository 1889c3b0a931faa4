package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseEdge covers the intake edge's records: rejections audit,
// quarantine, settings and secret re-encryption.
func exerciseEdge(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("RejectionInsertListPrune", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for i := range 5 {
			require.NoError(t, s.RejectionInsert(ctx, &store.Rejection{
				HostID: b.host.ID, Source: "github", At: base.Add(time.Duration(i) * time.Hour),
				Status: 401, Reason: fmt.Sprintf("reason %d", i), ClientIP: "203.0.113.7",
				HeaderNames: []string{"content-type", "x-hub-signature-256"},
			}))
		}
		require.NoError(t, s.RejectionInsert(ctx, &store.Rejection{HostID: b.other.ID, Source: "stripe", At: base, Status: 429, Reason: "rate limited"}))

		all, err := s.RejectionList(ctx, &store.RejectionListParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Len(t, all, 5, "only the host's own")
		require.Equal(t, "reason 4", all[0].Reason, "newest first")
		require.Equal(t, base.Add(4*time.Hour), all[0].At)
		require.Equal(t, []string{"content-type", "x-hub-signature-256"}, all[0].HeaderNames)
		require.Equal(t, "203.0.113.7", all[0].ClientIP)
		require.Equal(t, 401, all[0].Status)

		page, err := s.RejectionList(ctx, &store.RejectionListParams{HostID: b.host.ID, Limit: 2, BeforeID: all[1].ID})
		require.NoError(t, err)
		require.Equal(t, []string{"reason 2", "reason 1"}, []string{page[0].Reason, page[1].Reason})

		other, err := s.RejectionList(ctx, &store.RejectionListParams{HostID: b.other.ID})
		require.NoError(t, err)
		require.Len(t, other, 1)
		require.Empty(t, other[0].HeaderNames)
		require.NotNil(t, other[0].HeaderNames, "an empty list, not null")

		// Prune in bounded passes: everything before base+3h, two at a time.
		n, err := s.RejectionPrune(ctx, &store.PruneParams{Before: base.Add(3 * time.Hour), Limit: 2})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = s.RejectionPrune(ctx, &store.PruneParams{Before: base.Add(3 * time.Hour), Limit: 2})
		require.NoError(t, err)
		require.Equal(t, 2, n, "host-a's third old one and host-b's")
		n, err = s.RejectionPrune(ctx, &store.PruneParams{Before: base.Add(3 * time.Hour)})
		require.NoError(t, err)
		require.Zero(t, n)
		left, err := s.RejectionList(ctx, &store.RejectionListParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Equal(t, []string{"reason 4", "reason 3"}, []string{left[0].Reason, left[1].Reason})
	})

	// Everything a sender controls in a record is bounded, whatever it sent:
	// 40,000 header names are kept as 64 and a count.
	t.Run("RejectionBounded", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		names := []string{"a-" + strings.Repeat("n", 200)}
		for i := range 40_000 {
			names = append(names, fmt.Sprintf("x-junk-%05d", i))
		}
		reason := strings.Repeat("é", 400) // 800 bytes, two a character
		require.NoError(t, s.RejectionInsert(ctx, &store.Rejection{
			HostID: b.host.ID, Source: "github", At: base, Status: 401, Reason: reason,
			ClientIP: strings.Repeat("1", 1000), HeaderNames: names,
		}))
		rs, err := s.RejectionList(ctx, &store.RejectionListParams{HostID: b.host.ID})
		require.NoError(t, err)
		require.Len(t, rs, 1)
		r := rs[0]
		require.Len(t, r.HeaderNames, store.RejectionMaxHeaderNames+1, "64 names and the cut marker")
		require.Equal(t, "(39937 more)", r.HeaderNames[64])
		require.Equal(t, "a-"+strings.Repeat("n", 59)+"…", r.HeaderNames[0], "a long name is cut")
		require.Equal(t, "x-junk-00062", r.HeaderNames[63])
		for _, n := range r.HeaderNames {
			require.LessOrEqual(t, len(n), store.RejectionMaxNameBytes)
		}
		require.Equal(t, strings.Repeat("é", 250), r.Reason, "500 bytes, at a character boundary")
		require.True(t, utf8.ValidString(r.Reason))
		require.Len(t, r.ClientIP, store.RejectionMaxIPBytes)

		// A reason cut inside a character keeps the characters before it.
		require.NoError(t, s.RejectionInsert(ctx, &store.Rejection{
			HostID: b.other.ID, Source: "github", At: base, Status: 401, Reason: "x" + reason,
		}))
		rs, err = s.RejectionList(ctx, &store.RejectionListParams{HostID: b.other.ID})
		require.NoError(t, err)
		require.Equal(t, "x"+strings.Repeat("é", 249), rs[0].Reason)
	})

	t.Run("QuarantineBoundedListDelete", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		body := []byte("a\x00\xffb\r\n")
		q := store.QuarantinedRequest{
			HostID: b.host.ID, Source: "stripe", URL: "https://relay.example/api/webhooks/x/stripe?a=1",
			Header:    map[string][]string{"Stripe-Signature": {"t=1,v1=ab"}, "X-Multi": {"1", "2"}},
			TokenMACs: map[string][]byte{"X-Gitlab-Token": {0x00, 0xff, 0x10}},
			Body:      body,
			ClientIP:  "198.51.100.1", ReceivedAt: base,
		}
		var ids []int64
		for i := range 3 {
			qi := q
			qi.ReceivedAt = base.Add(time.Duration(i) * time.Second)
			got, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: qi, MaxRows: 3})
			require.NoError(t, err)
			require.NotZero(t, got.ID)
			ids = append(ids, got.ID)
		}
		_, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q, MaxRows: 3})
		require.ErrorIs(t, err, store.ErrQuarantineFull)
		requireQuarantined(ctx, t, s, 3)

		list, err := s.QuarantineList(ctx, &store.QuarantineListParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, ids[0], list[0].ID, "oldest first")
		require.Equal(t, body, list[0].Body, "byte-exact")
		require.Equal(t, q.Header, list[0].Header)
		require.Equal(t, q.TokenMACs, list[0].TokenMACs)
		require.Equal(t, q.URL, list[0].URL)
		require.Equal(t, base, list[0].ReceivedAt)
		rest, err := s.QuarantineList(ctx, &store.QuarantineListParams{AfterID: list[1].ID})
		require.NoError(t, err)
		require.Len(t, rest, 1)
		require.Equal(t, ids[2], rest[0].ID)

		require.NoError(t, s.QuarantineDelete(ctx, ids[0]))
		require.NoError(t, s.QuarantineDelete(ctx, ids[0]), "deleting twice is a no-op")
		requireQuarantined(ctx, t, s, 2)
		_, err = s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: q, MaxRows: 3})
		require.NoError(t, err, "room again")
	})

	// A request's bytes are its body's, its headers' (as JSON) and its
	// URL's: a sender controls all three.
	t.Run("QuarantineBoundedByBytes", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		q := store.QuarantinedRequest{HostID: b.host.ID, Source: "github", Header: map[string][]string{}, ReceivedAt: base}
		insert := func(body, url string, header map[string][]string, maxBytes int) error {
			qi := q
			qi.Body, qi.URL, qi.Header = []byte(body), url, header
			_, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: qi, MaxBytes: int64(maxBytes)})
			return err
		}
		empty := map[string][]string{} // "{}": 2 bytes
		require.NoError(t, insert(strings.Repeat("b", 598), "", empty, 1000), "600 bytes")
		require.ErrorIs(t, insert(strings.Repeat("b", 399), "", empty, 1000), store.ErrQuarantineFull, "600 + 401 would pass 1000")
		require.ErrorIs(t, insert("", strings.Repeat("u", 399), empty, 1000), store.ErrQuarantineFull, "the URL counts")
		big := map[string][]string{"X-Junk": {strings.Repeat("h", 380)}} // {"X-Junk":["…"]}: 395 bytes
		require.ErrorIs(t, insert("", "", big, 994), store.ErrQuarantineFull, "the headers count")
		require.NoError(t, insert(strings.Repeat("b", 5), "", big, 1000), "600 + 400 fits exactly")
		require.ErrorIs(t, insert("", "", empty, 1000), store.ErrQuarantineFull)
		requireQuarantined(ctx, t, s, 2)
	})

	// Each host has a share of the quarantine: one host's flood leaves the
	// others their room.
	t.Run("QuarantineHostShares", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		insert := func(hostID string, body int, p store.QuarantineInsertParams) error {
			p.QuarantinedRequest = store.QuarantinedRequest{HostID: hostID, Source: "github", Header: map[string][]string{},
				Body: make([]byte, body), ReceivedAt: base}
			_, err := s.QuarantineInsert(ctx, &p)
			return err
		}
		byRows := store.QuarantineInsertParams{MaxRows: 5, HostMaxRows: 3}
		for range 3 {
			require.NoError(t, insert(b.host.ID, 10, byRows))
		}
		err := insert(b.host.ID, 10, byRows)
		require.ErrorIs(t, err, store.ErrQuarantineHostFull, "the host's 3 are used")
		require.ErrorIs(t, err, store.ErrQuarantineFull, "which is a kind of full")
		require.NoError(t, insert(b.other.ID, 10, byRows), "another host still has room")
		require.NoError(t, insert(b.other.ID, 10, byRows))
		err = insert(b.other.ID, 10, byRows)
		require.ErrorIs(t, err, store.ErrQuarantineFull, "5 in all")
		require.NotErrorIs(t, err, store.ErrQuarantineHostFull, "the whole quarantine is full, not the host's share")

		// By bytes: each request here is 10 + 2 ("{}") bytes.
		byBytes := store.QuarantineInsertParams{MaxBytes: 1000, HostMaxBytes: 3*12 + 12 + 11}
		require.NoError(t, insert(b.host.ID, 10, byBytes), "36 + 12 <= 59")
		require.ErrorIs(t, insert(b.host.ID, 10, byBytes), store.ErrQuarantineHostFull, "48 + 12 > 59")
		require.NoError(t, insert(b.host.ID, 9, byBytes), "48 + 11 = 59")
		require.NoError(t, insert(b.other.ID, 20, byBytes), "the other host has its own share: 24 + 22 <= 59")
		requireQuarantined(ctx, t, s, 8)
	})

	t.Run("Meta", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		_, err := s.MetaGet(ctx, "canary")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.NoError(t, s.MetaPut(ctx, "canary", "v1"))
		require.NoError(t, s.MetaPut(ctx, "canary", "v2"))
		v, err := s.MetaGet(ctx, "canary")
		require.NoError(t, err)
		require.Equal(t, "v2", v)
	})

	t.Run("SourceSetSecretsGuarded", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, name := range []string{"stripe", "github"} {
			_, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{
				HostID: b.host.ID, Name: name, Provider: name, Enabled: true,
				Secrets: []store.SealedSecret{{Ciphertext: "old-" + name, Fingerprint: "f"}}, Now: base,
			})
			require.NoError(t, err)
		}
		_, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.other.ID, Name: "slack", Provider: "slack", Now: base})
		require.NoError(t, err)

		all, err := s.SourceListAll(ctx)
		require.NoError(t, err)
		require.Len(t, all, 3)
		gh := all[0]
		require.Equal(t, "github", gh.Name, "ordered by host, then name")

		later := base.Add(time.Minute)
		require.NoError(t, s.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{
			HostID: gh.HostID, Name: gh.Name, UpdatedAt: gh.UpdatedAt, Now: later,
			Secrets: []store.SealedSecret{{Ciphertext: "new", Fingerprint: "f"}},
		}))
		got, err := s.SourceGet(ctx, gh.HostID, gh.Name)
		require.NoError(t, err)
		require.Equal(t, []store.SealedSecret{{Ciphertext: "new", Fingerprint: "f"}}, got.Secrets)
		require.Equal(t, later, got.UpdatedAt)
		require.True(t, got.Enabled, "nothing else changes")

		// Written from a stale read: refused, the newer secrets stay.
		err = s.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{
			HostID: gh.HostID, Name: gh.Name, UpdatedAt: gh.UpdatedAt, Now: later.Add(time.Minute),
			Secrets: []store.SealedSecret{{Ciphertext: "stale", Fingerprint: "f"}},
		})
		require.ErrorIs(t, err, store.ErrConflict)
		got, err = s.SourceGet(ctx, gh.HostID, gh.Name)
		require.NoError(t, err)
		require.Equal(t, "new", got.Secrets[0].Ciphertext)

		err = s.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{HostID: gh.HostID, Name: "nope", UpdatedAt: base, Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// exerciseStaleNack: a nack that reports an attempt other than the current
// one (sent late, after the lease expired and the webhook went out again)
// changes nothing; one for the current attempt, or with no attempt, counts.
func exerciseStaleNack(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("NackOfAnEarlierAttemptIsIgnored", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// Attempt 1's lease expires; attempt 2 goes out.
		expired := base.Add(leaseFor + time.Second)
		d := handOutExpired(ctx, t, s, b.host.ID, "evt-stale", expired)
		again := expired.Add(delivery.DefaultRetryPolicy.Delays[1])
		leased := lease(ctx, t, s, b.host.ID, 1, 0, again)
		require.Len(t, leased, 1)
		require.Equal(t, 2, leased[0].Attempts)

		// The host's nack of attempt 1 arrives now: attempt 2 stays in flight.
		require.Zero(t, nack(ctx, t, s, b.host.ID, again, delivery.Nack{ID: d.ID, Error: "old", Retryable: true, Attempt: 1}))
		got := get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusDelivering, got.Status)
		require.Equal(t, 2, got.Attempts)

		// A nack of attempt 2 counts.
		require.Equal(t, 1, nack(ctx, t, s, b.host.ID, again, delivery.Nack{ID: d.ID, Error: "now", Retryable: true, Attempt: 2}))
		got = get(ctx, t, s, b.host.ID, d.ID)
		require.Equal(t, store.StatusRetrying, got.Status)
		require.Equal(t, "now", got.LastError)
	})
}

// exerciseInsertRace: a provider's retries racing each other store the event
// once; every other insert answers duplicate with the first delivery.
func exerciseInsertRace(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("InsertSameEventConcurrently", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const n = 8
		results := make(chan *store.DeliveryInsertResult, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			at := base.Add(time.Duration(i) * time.Millisecond) // each try its own delivery id
			wg.Go(func() {
				res, err := s.DeliveryInsert(ctx, insertParams(b.host.ID, "evt-race", at, deliveryOpts{}))
				if err != nil {
					errs <- err
					return
				}
				results <- res
			})
		}
		wg.Wait()
		close(errs)
		close(results)
		for err := range errs {
			require.NoError(t, err)
		}
		var first string
		queued := 0
		for res := range results {
			if res.Outcome == store.InsertQueued {
				queued++
			}
			if first == "" {
				first = res.Delivery.ID
			}
			require.Equal(t, first, res.Delivery.ID, "every answer names the one stored delivery")
		}
		require.Equal(t, 1, queued, "stored once")
		ds, err := s.DeliveryList(ctx, &store.DeliveryListParams{HostID: b.host.ID, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Len(t, events(ctx, t, s, first), 1, "one received event")
	})
}

// requireQuarantined checks that the quarantine holds n requests.
func requireQuarantined(ctx context.Context, t *testing.T, s store.Store, n int) {
	t.Helper()
	got, err := s.QuarantineCount(ctx)
	require.NoError(t, err)
	require.Equal(t, n, got)
}
