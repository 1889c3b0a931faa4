package shared

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckEventFilter(t *testing.T) {
	for _, e := range []string{"*", "push", "pull_request.opened", "invoice.payment_failed", "orders/create",
		"app_uninstalled", "invoice:paid", "a-b", "A.B.C", strings.Repeat("E", 128) + "." + strings.Repeat("a", 128)} {
		require.NoError(t, CheckEventFilter(e), e)
	}
	for e, want := range map[string]string{
		"":                       "empty event name",
		" ":                      "empty event name",
		"pull_request.*":         `the only wildcard is "*" on its own`,
		"*.opened":               `the only wildcard is "*" on its own`,
		"**":                     `the only wildcard is "*" on its own`,
		"pull request":           `invalid event name "pull request"`,
		"a..b":                   `invalid event name "a..b"`,
		".push":                  `invalid event name ".push"`,
		"push.":                  `invalid event name "push."`,
		"é":                      `invalid event name "é"`,
		"push\n":                 `invalid event name "push\n"`,
		strings.Repeat("e", 258): "at most 257 characters",
	} {
		err := CheckEventFilter(e)
		require.Error(t, err, "%q", e)
		require.Contains(t, err.Error(), want, "%q", e)
	}
	// What the rule takes, EventWanted can match.
	require.True(t, EventWanted([]string{"orders.create"}, "orders", "create"))
	require.False(t, EventWanted([]string{"pull_request.*"}, "pull_request", "opened"), "why it is refused")
}
