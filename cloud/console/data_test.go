package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
)

var dataBase = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func dataStore(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	s := sqlitetest.Open(t)
	for _, h := range []string{"h1", "h2"} {
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: h, Name: "host " + h, Now: dataBase})
		require.NoError(t, err)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: h, Name: "gh", Provider: "github", Enabled: true, Now: dataBase})
		require.NoError(t, err)
	}
	return s
}

func insertDelivery(t *testing.T, s store.Store, host, event string, at time.Time, body string) *store.Delivery {
	t.Helper()
	r, err := s.DeliveryInsert(context.Background(), &store.DeliveryInsertParams{ID: store.DeliveryID("gh", event, at), HostID: host,
		Source: "gh", EventID: event, EventType: "push", Headers: map[string]string{"X-Github-Event": "push"}, RawBody: []byte(body), ReceivedAt: at})
	require.NoError(t, err)
	return r.Delivery
}

func TestDeliveriesPages(t *testing.T) {
	ctx := context.Background()
	s := dataStore(t)
	for i := range 120 {
		insertDelivery(t, s, []string{"h1", "h2"}[i%2], fmt.Sprintf("e%03d", i), dataBase.Add(time.Duration(i)*time.Second), `{}`)
	}
	var seen []string
	q := url.Values{"host": {"h1"}}
	for page := 0; ; page++ {
		d, err := loadDeliveries(ctx, s, q)
		require.NoError(t, err)
		for _, r := range d.Deliveries {
			require.Equal(t, "h1", r.HostID)
			seen = append(seen, r.EventID)
		}
		require.Equal(t, page > 0, d.First != "", "page %d", page)
		if d.Next == "" {
			break
		}
		q = linkQuery(t, d.Next)
		require.Equal(t, "h1", q.Get("host"), "the filter is kept")
	}
	require.Len(t, seen, 60, "every one of h1's, once")
	require.Equal(t, "e118", seen[0], "newest first")
	require.Equal(t, "e000", seen[59])

	d, err := loadDeliveries(ctx, s, url.Values{"until": {"2026-11-26T10:00:10"}, "event_id": {"e004"}})
	require.NoError(t, err)
	require.Len(t, d.Deliveries, 1)
	require.Equal(t, "pending", d.Deliveries[0].StatusLabel)
	require.Equal(t, "/console/hosts/h1/deliveries/"+url.PathEscape(d.Deliveries[0].ID), d.Deliveries[0].Href)
	d, err = loadDeliveries(ctx, s, url.Values{"since": {"2026-11-26T10:01:50Z"}, "status": {"queued"}})
	require.NoError(t, err)
	require.Len(t, d.Deliveries, 10)
	require.Len(t, d.Tabs, 7)
	require.True(t, d.Tabs[1].Current)
	require.Contains(t, d.Tabs[6].Href, "status=dlq")
	require.Contains(t, d.Tabs[6].Href, "since=", "tabs keep the other filters")

	for _, bad := range []url.Values{{"status": {"lost"}}, {"since": {"yesterday"}}, {"cursor": {"!!"}}, {"source": {strings.Repeat("x", 501)}}} {
		_, err := loadDeliveries(ctx, s, bad)
		var fe *errFilter
		require.ErrorAs(t, err, &fe, "%v", bad)
	}
}

func TestDeliveryPageData(t *testing.T) {
	ctx := context.Background()
	s := dataStore(t)
	x := insertDelivery(t, s, "h1", "e1", dataBase, `{"a":[1,2],"html":"<script>alert(1)</script>"}`)
	d, err := loadDelivery(ctx, s, "h1", x.ID, false, dataBase)
	require.NoError(t, err)
	require.True(t, d.IsJSON)
	require.Equal(t, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"html\": \"<script>alert(1)</script>\"\n}", d.Body)
	require.Equal(t, []header{{"X-Github-Event", "push"}}, d.Headers)
	require.Len(t, d.Timeline, 1)
	require.Equal(t, "received", d.Timeline[0].Reason)
	require.False(t, d.CanRetry)
	require.Nil(t, d.Result)
	require.Equal(t, "wait", d.Next.Action, "the next action, as inspect gives it")
	require.Contains(t, d.Next.Why, "nothing ran since it was queued")

	d, err = loadDelivery(ctx, s, "h1", x.ID, true, dataBase)
	require.NoError(t, err)
	require.Equal(t, `{"a":[1,2],"html":"<script>alert(1)</script>"}`, d.Body, "raw")

	_, err = loadDelivery(ctx, s, "h2", x.ID, false, dataBase)
	require.ErrorIs(t, err, store.ErrNotFound, "another host's")

	body, isJSON, cut := showBody([]byte("not json \xff"), false)
	require.False(t, isJSON)
	require.False(t, cut)
	require.Equal(t, "not json \uFFFD", body)
	body, _, cut = showBody([]byte(strings.Repeat("é", maxShownBody)), false)
	require.True(t, cut)
	require.LessOrEqual(t, len(body), maxShownBody+3)
}

func TestVolumeAndRejectionsData(t *testing.T) {
	ctx := context.Background()
	s := dataStore(t)
	insertDelivery(t, s, "h1", "e1", dataBase, `{}`)
	for i := range 60 {
		require.NoError(t, s.RejectionInsert(ctx, &store.Rejection{HostID: "h2", Source: "gh", At: dataBase, Status: 401,
			Reason: fmt.Sprint("signature ", i), ClientIP: "192.0.2.1", HeaderNames: []string{"x-hub-signature-256"}}))
	}
	v, err := loadVolume(ctx, s, "h1", dataBase.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, outcomeTotal{"received", 1}, v.Relay.Totals[0])
	require.NotNil(t, v.Host)
	require.Equal(t, outcomeTotal{"rejected", 0}, v.Host.Totals[4])
	require.Equal(t, outcomeTotal{"rejected", 60}, v.Relay.Totals[4])
	require.Len(t, v.Hosts, 2)
	byHost, err := ReceivedPerHour(s)(ctx, dataBase.Add(time.Minute), []string{"h1", "h2"})
	require.NoError(t, err)
	require.Len(t, byHost, 1, "hosts with none are left out")
	require.Len(t, byHost["h1"], 24)
	require.Equal(t, 1, byHost["h1"][23], "the sparkline's current hour")
	v, err = loadVolume(ctx, s, "nope", dataBase)
	require.NoError(t, err)
	require.Equal(t, "nope", v.NoSuchHost)

	r, err := loadRejections(ctx, s, url.Values{"host": {"h2"}})
	require.NoError(t, err)
	require.Len(t, r.Rejections, 50)
	require.Equal(t, "signature 59", r.Rejections[0].Reason, "newest first")
	r = nextRejections(t, s, r.Next)
	require.Len(t, r.Rejections, 10)
	require.Empty(t, r.Next)
	require.NotEmpty(t, r.First)
	r, err = loadRejections(ctx, s, url.Values{})
	require.NoError(t, err)
	require.Equal(t, "h1", r.Host, "the first host by default")
	require.Empty(t, r.Rejections)
	_, err = loadRejections(ctx, s, url.Values{"host": {"nope"}})
	require.Error(t, err)
	_, err = loadRejections(ctx, s, url.Values{"cursor": {"-3"}})
	require.Error(t, err)
}

// linkQuery is the query of a page's link.
func linkQuery(t *testing.T, link string) url.Values {
	t.Helper()
	u, err := url.Parse(link)
	require.NoError(t, err)
	return u.Query()
}

// nextRejections loads the rejections page a link leads to.
func nextRejections(t *testing.T, s rejectionsReader, link string) *rejectionsData {
	t.Helper()
	r, err := loadRejections(context.Background(), s, linkQuery(t, link))
	require.NoError(t, err)
	return r
}

// The quarantine is listed oldest first, 50 a page, with header names
// (lower-case, sorted) and body sizes only.
func TestQuarantineData(t *testing.T) {
	ctx := context.Background()
	s := dataStore(t)
	for i := range 55 {
		_, err := s.QuarantineInsert(ctx, &store.QuarantineInsertParams{QuarantinedRequest: store.QuarantinedRequest{
			HostID: "h1", Source: "gh", Header: map[string][]string{"X-Hub-Signature-256": {"sha256=secret-ish"}, "Content-Type": {"application/json"}},
			Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), ClientIP: "192.0.2.3", ReceivedAt: dataBase.Add(time.Duration(i) * time.Second)}})
		require.NoError(t, err)
	}
	r, err := loadRejections(ctx, s, url.Values{})
	require.NoError(t, err)
	require.Equal(t, 55, r.QuarantineCount)
	require.Len(t, r.Quarantine, 50)
	first := r.Quarantine[0]
	require.Equal(t, []string{"content-type", "x-hub-signature-256"}, first.HeaderNames)
	require.Equal(t, len(`{"n":0}`), first.BodySize)
	require.Equal(t, dataBase, first.ReceivedAt, "oldest first")
	require.Contains(t, r.QuarantineNext, "qafter=")
	r = nextRejections(t, s, r.QuarantineNext)
	require.Len(t, r.Quarantine, 5)
	require.Empty(t, r.QuarantineNext)
	require.NotEmpty(t, r.QuarantineFirst)
}
