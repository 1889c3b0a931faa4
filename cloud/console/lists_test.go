package console

import (
	"html"
	"regexp"
	"testing"

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
