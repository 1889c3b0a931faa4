package console

import (
	"context"
	"fmt"
	"html"
	"regexp"
	"testing"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/stretchr/testify/require"
)

// TestListsShowHostNames: the deliveries list names each delivery's host
// by its name, with its id as the link's title, and links to the host; a
// status badge never wraps.
func TestListsShowHostNames(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	id := pagesHost(t, b, "office laptop")
	d := pagesInsert(t, b, id, "e-1", "push", map[string]string{"X-Github-Event": "push"}, `{}`)

	a := cl.get("/console/deliveries")
	require.Equal(t, 200, a.status)
	page := html.UnescapeString(string(a.body))
	row := regexp.MustCompile(`(?s)<tr class="delivery-row[^"]*" data-delivery="` + regexp.QuoteMeta(d.ID) + `">.*?</tr>`).FindString(page)
	require.NotEmpty(t, row, "the delivery's row")
	require.Contains(t, row, `<td class="host"><a href="/console/hosts/`+id+`" title="`+id+`">office laptop</a></td>`)

	css := cl.get("/console/assets/console.css")
	require.Equal(t, 200, css.status)
	require.Regexp(t, `(?m)^\.tag \{[^}]*white-space: nowrap;`, string(css.body), "badges do not wrap")
}

// TestHostsPages: the hosts page shows a hundred hosts at a time, oldest
// first, each with what waits for it (its counts kept, the oldest of
// them), and links to the next page and back to the first.
func TestHostsPages(t *testing.T) {
	b := setup(t)
	cl := b.loggedIn()
	ctx := context.Background()
	var ids []string
	for i := range hostsPageSize + 5 {
		res, err := b.app.CreateHost(ctx, fmt.Sprintf("host %03d", i))
		require.NoError(t, err)
		ids = append(ids, res.ID)
		b.clock.Advance(time.Millisecond)
	}
	// The last host has two webhooks waiting, one of them leased.
	last := ids[len(ids)-1]
	first := pagesInsert(t, b, last, "e-1", "push", nil, `{}`)
	b.clock.Advance(time.Minute)
	pagesInsert(t, b, last, "e-2", "push", nil, `{}`)
	_, err := b.store.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: last, Max: 1, LeaseFor: time.Hour, Now: b.clock.Now()})
	require.NoError(t, err)
	b.clock.Advance(time.Minute)

	rows := regexp.MustCompile(`data-host="(h_[^"]+)"`)
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`)
	a := cl.get("/console/")
	require.Equal(t, 200, a.status)
	page := string(a.body)
	var shown []string
	for _, m := range rows.FindAllStringSubmatch(page, -1) {
		shown = append(shown, m[1])
	}
	require.Equal(t, ids[:hostsPageSize], shown)
	require.NotContains(t, page, "« First")
	link := next.FindStringSubmatch(page)
	require.NotNil(t, link, "a next page")

	a = cl.get(html.UnescapeString(link[1]))
	require.Equal(t, 200, a.status)
	page = string(a.body)
	shown = nil
	for _, m := range rows.FindAllStringSubmatch(page, -1) {
		shown = append(shown, m[1])
	}
	require.Equal(t, ids[hostsPageSize:], shown)
	require.Nil(t, next.FindStringSubmatch(page), "the last page")
	require.Contains(t, page, `<a href="/console/">« First</a>`)
	row := regexp.MustCompile(`(?s)<tr class="host-row[^"]*" data-host="` + last + `">.*?</tr>`).FindString(page)
	require.Regexp(t, `<td class="num">2</td>\s*<td>2m ago</td>`, row, "two waiting, the oldest (%s) received two minutes ago", first.ID)

	require.Equal(t, 400, cl.get("/console/?cursor=nonsense").status)
}
