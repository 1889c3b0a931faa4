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

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[string]int{
		CodeInvalid: 400, CodeUnauthorized: 401, CodeNotFound: 404, CodeMethodNotAllowed: 405, CodeConflict: 409,
		CodeGone: 410, CodeTooLarge: 413, CodeMisdirected: 421, CodeRateLimited: 429, CodeCanceled: 499,
		CodeInternal: 500, CodeNotImplemented: 501, CodeUnavailable: 503,
	} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", code, got, want)
		}
	}
	if got := HTTPStatus("no_such_code"); got != 500 {
		t.Errorf("an unknown code: %d, want 500", got)
	}
}
