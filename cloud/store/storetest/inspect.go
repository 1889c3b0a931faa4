package storetest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
)

// exerciseInspect covers the operator's cross-host reads and the results
// hosts report.
func exerciseInspect(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("DeliveryFind", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, src := range []struct{ host, name, provider string }{
			{b.host.ID, "github", "github"}, {b.host.ID, "pay", "stripe"}, {b.other.ID, "github", "github"},
		} {
			_, err := s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: src.host, Name: src.name, Provider: src.provider, Enabled: true, Now: base})
			require.NoError(t, err)
		}
		a1 := insert(ctx, t, s, b.host.ID, "evt-1", base, deliveryOpts{})
		a2 := insert(ctx, t, s, b.host.ID, "evt-2", base.Add(time.Second), deliveryOpts{source: "pay"})
		o1 := insert(ctx, t, s, b.other.ID, "evt-1", base.Add(2*time.Second), deliveryOpts{})
		o2 := insert(ctx, t, s, b.other.ID, "evt-3", base.Add(3*time.Second), deliveryOpts{})
		require.Len(t, handOut(ctx, t, s, b.other.ID, 1, 0, base.Add(4*time.Second)), 1) // o1 is delivered

		find := func(p store.DeliveryFindParams) []string {
			t.Helper()
			ds, err := s.DeliveryFind(ctx, &p)
			require.NoError(t, err)
			return ids(ds)
		}
		require.Equal(t, []string{o2.ID, o1.ID, a2.ID, a1.ID}, find(store.DeliveryFindParams{}), "every host, newest first")
		require.Equal(t, []string{a2.ID, a1.ID}, find(store.DeliveryFindParams{HostID: b.host.ID}))
		require.Equal(t, []string{o1.ID, a1.ID}, find(store.DeliveryFindParams{EventID: "evt-1"}), "one event id on two hosts")
		require.Equal(t, []string{o2.ID}, find(store.DeliveryFindParams{CorrelationID: o2.CorrelationID}))
		require.Equal(t, []string{a2.ID}, find(store.DeliveryFindParams{Provider: "stripe"}))
		require.Equal(t, []string{o2.ID, o1.ID, a1.ID}, find(store.DeliveryFindParams{Provider: "github"}))
		require.Equal(t, []string{o2.ID, a2.ID, a1.ID}, find(store.DeliveryFindParams{Status: store.StatusQueued}))
		require.Equal(t, []string{o1.ID}, find(store.DeliveryFindParams{Status: store.StatusDelivered}))
		require.Equal(t, []string{a2.ID}, find(store.DeliveryFindParams{Source: "pay"}))
		require.Equal(t, []string{o2.ID, o1.ID}, find(store.DeliveryFindParams{ReceivedSince: ptr(base.Add(2 * time.Second))}))
		require.Empty(t, find(store.DeliveryFindParams{EventID: "evt-none"}))

		// Pages follow the keyset cursor.
		var got []string
		p := store.DeliveryFindParams{Limit: 3}
		for {
			page, err := s.DeliveryFind(ctx, &p)
			require.NoError(t, err)
			got = append(got, ids(page)...)
			if len(page) < p.Limit {
				break
			}
			last := page[len(page)-1]
			p.BeforeReceivedAt, p.BeforeID = &last.ReceivedAt, last.ID
		}
		require.Equal(t, []string{o2.ID, o1.ID, a2.ID, a1.ID}, got)
	})

	t.Run("DeliveryEventListAfter", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		a := insert(ctx, t, s, b.host.ID, "evt-a", base, deliveryOpts{})
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{source: "gitlab"})
		require.Len(t, handOut(ctx, t, s, b.host.ID, 1, 0, base), 1)

		all, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{})
		require.NoError(t, err)
		var seen []string
		for _, e := range all {
			seen = append(seen, e.DeliveryID+" "+e.HostID+" "+e.Source+" "+string(e.From)+">"+string(e.To))
		}
		require.Equal(t, []string{
			a.ID + " " + b.host.ID + " github >queued",
			o.ID + " " + b.other.ID + " gitlab >queued",
			a.ID + " " + b.host.ID + " github queued>delivering",
			a.ID + " " + b.host.ID + " github delivering>delivered",
		}, seen, "oldest first, each with its host and source")

		after, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{AfterID: all[1].ID, Limit: 1})
		require.NoError(t, err)
		require.Len(t, after, 1)
		require.Equal(t, all[2].ID, after[0].ID)
		newest, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{Newest: true, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{all[2].ID, all[3].ID}, []int64{newest[0].ID, newest[1].ID}, "the newest, oldest first")
	})

	t.Run("DeliveryResult", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		d := handOutOne(ctx, t, s, b.host.ID, "evt-r", base)
		o := insert(ctx, t, s, b.other.ID, "evt-o", base, deliveryOpts{})

		_, err := s.DeliveryResultGet(ctx, d.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "no result reported yet")

		now := base.Add(time.Minute)
		status := 502
		_, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID, Results: []store.DeliveryResult{
			{DeliveryID: d.ID, Attempt: 1, Result: "error", Handler: "forward http://localhost:3000/hook",
				ResponseStatus: &status, DurationMS: 12, Error: strings.Repeat("é", 5000), ReportedAt: now},
			{DeliveryID: o.ID, Attempt: 1, Result: "success", ReportedAt: now},
			{DeliveryID: "github:nope:1", Attempt: 1, Result: "success", ReportedAt: now},
		}})
		require.NoError(t, err)
		r, err := s.DeliveryResultGet(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, "error", r.Result)
		require.Equal(t, &status, r.ResponseStatus)
		require.Nil(t, r.ExitCode)
		require.Equal(t, int64(12), r.DurationMS)
		require.Equal(t, now, r.ReportedAt)
		require.LessOrEqual(t, len(r.Error), 2000, "bounded")
		require.True(t, strings.HasPrefix(r.Error, "éé"))
		_, err = s.DeliveryResultGet(ctx, o.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "another host's delivery is not its to report")

		// A later run replaces it, in the same transaction as its ack; of
		// two results of one delivery in a report, the last counts.
		exit := 0
		handler := "exec ./deploy --note \"a\\b\"\t\n\u2028 <&>"
		res, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Ack: &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: now},
			Results: []store.DeliveryResult{{DeliveryID: d.ID, Attempt: 2, Result: "error", ReportedAt: now},
				{DeliveryID: d.ID, Attempt: 2, Result: "success", Handler: handler, ExitCode: &exit, ReportedAt: now}}})
		require.NoError(t, err)
		require.Equal(t, 1, res.Acked)
		r, err = s.DeliveryResultGet(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryResult{DeliveryID: d.ID, Attempt: 2, Result: "success", Handler: handler,
			ExitCode: &exit, ReportedAt: now}, *r, "kept as sent, quotes, escapes and all")

		// A result reported with an ack that no longer applies (acked
		// already: the host lost the answer) replaces the one kept all the
		// same; so does one reported with a nack, beside an ack.
		e := handOutOne(ctx, t, s, b.host.ID, "evt-n", base)
		res, err = s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: b.host.ID,
			Ack:  &store.DeliveryAckParams{HostID: b.host.ID, IDs: []string{d.ID}, Now: now},
			Nack: delivery.NackParams(b.host.ID, []delivery.Nack{{ID: e.ID, Error: "500", Retryable: true}}, delivery.RetryPolicy{}, now),
			Results: []store.DeliveryResult{{DeliveryID: d.ID, Attempt: 2, Result: "skipped", ReportedAt: now},
				{DeliveryID: e.ID, Attempt: 1, Result: "error", Error: "500", ReportedAt: now}}})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryReportResult{Nacked: 1}, *res)
		r, err = s.DeliveryResultGet(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, "skipped", r.Result)
		r, err = s.DeliveryResultGet(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryResult{DeliveryID: e.ID, Attempt: 1, Result: "error", Error: "500", ReportedAt: now}, *r)
		require.Equal(t, store.StatusRetrying, get(ctx, t, s, b.host.ID, e.ID).Status)

		// Deleting the delivery deletes its result.
		n, err := s.DeliveryPrune(ctx, &store.DeliveryPruneParams{Status: store.StatusAcked, PruneParams: store.PruneParams{Before: now.Add(time.Hour)}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = s.DeliveryResultGet(ctx, d.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// EventsWithoutOwners holds the audit trail of every delivery to the
// events written before events carried their host and source: forget
// clears those two columns of every stored event, as such events have
// them. Each is answered as before, with its delivery's host and source.
func EventsWithoutOwners(ctx context.Context, t *testing.T, s store.Store, forget func(ctx context.Context) error) {
	t.Helper()
	h := createHost(ctx, t, s, "h-owners", base)
	o := createHost(ctx, t, s, "h-owners-2", base)
	insert(ctx, t, s, h.ID, "evt-a", base, deliveryOpts{})
	insert(ctx, t, s, o.ID, "evt-o", base, deliveryOpts{source: "gitlab"})
	require.Len(t, handOut(ctx, t, s, h.ID, 1, 0, base), 1)
	want, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{})
	require.NoError(t, err)
	require.Len(t, want, 4)

	require.NoError(t, forget(ctx))
	got, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{})
	require.NoError(t, err)
	require.Equal(t, want, got, "events without their own host and source take their delivery's")
	newest, err := s.DeliveryEventListAfter(ctx, &store.DeliveryEventListAfterParams{Newest: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, want[3:], newest)
}

// RequireEventsOwned fails t if an audit event in db lacks its host or
// source: an engine's conformance run checks it after each test, so that
// every path that writes an event is held to it.
func RequireEventsOwned(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	var reason string
	err := db.QueryRowContext(ctx, `SELECT reason FROM delivery_events WHERE host_id IS NULL OR source IS NULL LIMIT 1`).Scan(&reason)
	require.ErrorIs(t, err, sql.ErrNoRows, "an audit event written without its delivery's host or source: %q", reason)
}
