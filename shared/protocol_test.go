package shared

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEventWanted(t *testing.T) {
	cases := []struct {
		events      []string
		typ, action string
		want        bool
	}{
		{nil, "push", "", true},
		{[]string{"push"}, "push", "", true},
		{[]string{"push"}, "pull_request", "opened", false},
		{[]string{"pull_request"}, "pull_request", "closed", true},
		{[]string{"pull_request.opened"}, "pull_request", "opened", true},
		{[]string{"pull_request.opened"}, "pull_request", "closed", false},
		{[]string{"pull_request.opened"}, "pull_request", "", false},
		{[]string{"*"}, "anything", "", true},
		{[]string{"push", "issues.opened"}, "issues", "opened", true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, EventWanted(c.events, c.typ, c.action), "%v %s.%s", c.events, c.typ, c.action)
	}
}
