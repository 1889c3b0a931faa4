package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/sqlite"
)

// The console's group pages in a real browser against the real cloud and
// host binaries: the groups page (from the navigation) lists a group with
// its members and sources counted, the group's page shows its members in
// order with the presence of each (a running host online, an unclaimed
// one not claimed), its sources with their mode and public URL to copy,
// and a member's host page links back to the group. The group is made
// through the store the cloud runs on. Each page is screenshotted.
func TestConsoleGroups(t *testing.T) {
	t.Parallel()
	eachEngine(t, testConsoleGroups)
}

// openStoreOf opens the store at the cloud's database URL, beside the
// running cloud, until the test ends.
func openStoreOf(t *testing.T, dbURL string) store.Store {
	t.Helper()
	var st store.Store
	var err error
	if path, ok := strings.CutPrefix(dbURL, "sqlite:"); ok {
		st, err = sqlite.Open(context.Background(), path)
	} else {
		st, err = postgres.Open(context.Background(), dbURL)
	}
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func testConsoleGroups(t *testing.T, dbURL string) {
	c := startCloud(t, dbURL)
	desk, deskCode := c.newHost("desk", secret)
	laptop, _ := c.newHost("laptop <b>two</b>", secret)
	rc := startReceiver(t)
	startHost(t, c.url, deskCode, forwardTo(rc.url, nil))

	ctx := context.Background()
	st := openStoreOf(t, dbURL)
	const groupID = "g_consolegroupsbrowser00"
	now := time.Now().UTC().Truncate(time.Millisecond)
	_, err := st.GroupCreate(ctx, &store.GroupCreateParams{ID: groupID, Name: "office <i>pcs</i>", Now: now})
	require.NoError(t, err)
	for _, h := range []string{laptop, desk} {
		_, err = st.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: groupID, HostID: h, Now: now})
		require.NoError(t, err)
	}
	for name, mode := range map[string]store.GroupMode{"github": store.GroupFanout, "stripe": store.GroupAny} {
		_, err = st.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: groupID, Name: name, Provider: name, Enabled: true, Mode: mode, Now: now})
		require.NoError(t, err)
	}

	bctx := newBrowser(t)
	consoleLogin(t, bctx, c)
	row := `tr[data-group="` + groupID + `"]`
	submitAndWait(t, bctx, "open the groups page", `nav a[href="/console/groups"]`, row)
	require.Equal(t, "office <i>pcs</i>", text(t, bctx, row+" td a"), "the name as text")
	require.Equal(t, "active", text(t, bctx, row+" .tag"))
	require.Equal(t, "2", text(t, bctx, row+" td.members"))
	require.Equal(t, "2", text(t, bctx, row+" td.sources"))
	screenshot(t, bctx, "groups")

	submitAndWait(t, bctx, "open the group", row+" td a", "#members")
	members := get(t, bctx, "the members' order",
		chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("tr.member-row"), r => r.dataset.host)`))
	require.Equal(t, []string{laptop, desk}, members)
	require.Equal(t, "not claimed", text(t, bctx, `tr[data-host="`+laptop+`"] .presence`))
	eventually(t, 30*time.Second, "the running member shows online", func() bool {
		do(t, bctx, "reload", chromedp.Navigate(c.url+"/console/groups/"+groupID), chromedp.WaitVisible(chromedp.ID("members")))
		return text(t, bctx, `tr[data-host="`+desk+`"] .presence`) == "online"
	})
	for name, mode := range map[string]string{"github": "fanout", "stripe": "any"} {
		require.Equal(t, mode, text(t, bctx, "#source-"+name+" .tag.mode"))
		require.Equal(t, c.url+"/api/webhooks/"+groupID+"/"+name, get(t, bctx, "webhook URL", chromedp.Value(chromedp.ID("url-"+name))))
	}
	// The script ran under the CSP: it showed the copy button.
	do(t, bctx, "copy button shown", chromedp.WaitVisible(chromedp.CSS(`button.copy[data-copy="url-github"]`)))
	require.Equal(t, "laptop <b>two</b>", text(t, bctx, `tr[data-host="`+laptop+`"] td a`), "names are text")
	require.False(t, get(t, bctx, "no markup from a name", chromedp.Evaluate[bool](`document.querySelector("main i") !== null`)))
	screenshot(t, bctx, "group")

	// A member's page names its group, and leads back to it.
	submitAndWait(t, bctx, "open a member", `tr[data-host="`+desk+`"] td a`, "#host-groups")
	require.Equal(t, "office <i>pcs</i>", text(t, bctx, "#host-groups"))
	screenshot(t, bctx, "group-member")
	submitAndWait(t, bctx, "back to the group", "#host-groups a", "#members")
	require.Contains(t, get(t, bctx, "location", chromedp.Location()), "/console/groups/"+groupID)
}
