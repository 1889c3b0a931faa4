package shared

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompareSources(t *testing.T) {
	t.Parallel()
	on := func(events ...string) SourceSubscription { return SourceSubscription{Enabled: true, Events: events} }
	off := SourceSubscription{}
	src := func(name string, enabled bool, events ...string) HostSource {
		return HostSource{Name: name, Provider: "github", Enabled: enabled, Events: events}
	}
	// typed is a source of a provider whose events carry no action
	// (Stripe's), as a cloud that says so has it.
	typed := func(name string, events ...string) HostSource {
		no := false
		return HostSource{Name: name, Provider: "stripe", Enabled: true, Events: events, Actions: &no}
	}
	type want struct{ kind, source, nearest string }
	for _, tc := range []struct {
		name  string
		host  map[string]SourceSubscription
		cloud []HostSource
		want  []want
	}{
		{"agree", map[string]SourceSubscription{"github": on(), "stripe": on("invoice.paid")},
			[]HostSource{src("github", true), src("stripe", true)}, nil},
		{"typo: each side names the other", map[string]SourceSubscription{"githb": on()},
			[]HostSource{src("github", true)},
			[]want{{MismatchNotInCloud, "githb", "github"}, {MismatchNotOnHost, "github", "githb"}}},
		{"swapped letters are one edit", map[string]SourceSubscription{"gihtub": on()},
			[]HostSource{src("github", true)},
			[]want{{MismatchNotInCloud, "gihtub", "github"}, {MismatchNotOnHost, "github", "gihtub"}}},
		{"case alone", map[string]SourceSubscription{"GitHub": on()},
			[]HostSource{src("github", true)},
			[]want{{MismatchNotInCloud, "GitHub", "github"}, {MismatchNotOnHost, "github", "GitHub"}}},
		{"nothing close", map[string]SourceSubscription{"linear": on()},
			[]HostSource{src("github", true)},
			[]want{{MismatchNotOnHost, "github", ""}, {MismatchNotInCloud, "linear", ""}}},
		{"short names are not typos of each other", map[string]SourceSubscription{"a": on()},
			[]HostSource{src("b", true)},
			[]want{{MismatchNotInCloud, "a", ""}, {MismatchNotOnHost, "b", ""}}},
		{"the nearest of several, preferring the ones the host does not name",
			map[string]SourceSubscription{"githubb": on(), "github": on()},
			[]HostSource{src("github", true), src("github2", true)},
			[]want{{MismatchNotOnHost, "github2", "githubb"}, {MismatchNotInCloud, "githubb", "github2"}}},
		{"a typo of a source the host also names", map[string]SourceSubscription{"github": on(), "githb": on()},
			[]HostSource{src("github", true)},
			[]want{{MismatchNotInCloud, "githb", "github"}}},
		{"disabled on the host", map[string]SourceSubscription{"github": off},
			[]HostSource{src("github", true)},
			[]want{{MismatchDisabledOnHost, "github", ""}}},
		{"disabled in the cloud", map[string]SourceSubscription{"github": on()},
			[]HostSource{src("github", false)},
			[]want{{MismatchDisabledInCloud, "github", ""}}},
		{"disabled on both sides, or on one and absent on the other", map[string]SourceSubscription{"github": off, "old": off},
			[]HostSource{src("github", false), src("retired", false)}, nil},
		{"events the cloud filters out", map[string]SourceSubscription{"github": on("push", "pull_request.opened", "issues", "check_suite")},
			[]HostSource{src("github", true, "push", "pull_request", "check_suite.completed")},
			[]want{{MismatchEventsNotSent, "github", ""}}},
		{"a filter entry of an older cloud that matches nothing passes nothing",
			map[string]SourceSubscription{"github": on("pull_request", "push")},
			[]HostSource{src("github", true, "pull_request.*", "push")},
			[]want{{MismatchEventsNotSent, "github", ""}, {MismatchFilterMatchesNothing, "github", ""}}},
		{"a host that takes every event, behind a filter that matches nothing", map[string]SourceSubscription{"github": on()},
			[]HostSource{src("github", true, "pull_request.*")},
			[]want{{MismatchFilterMatchesNothing, "github", ""}}},
		{"a type alone takes no event of a provider without actions",
			map[string]SourceSubscription{"stripe": on("invoice.paid", "customer.created", "charge")},
			[]HostSource{typed("stripe", "invoice", "customer.created", "charge.refunded")},
			[]want{{MismatchEventsNotSent, "stripe", ""}}},
		{"nor a cloud that does not say whether events carry actions: taken as if they did",
			map[string]SourceSubscription{"stripe": on("invoice.paid")},
			[]HostSource{{Name: "stripe", Provider: "stripe", Enabled: true, Events: []string{"invoice"}}}, nil},
		{"the cloud sends every event", map[string]SourceSubscription{"github": on("push")},
			[]HostSource{src("github", true, "*")}, nil},
		{"the host takes every event", map[string]SourceSubscription{"github": on()},
			[]HostSource{src("github", true, "push")}, nil},
		{"a host that reported nothing", nil,
			[]HostSource{src("github", true)},
			[]want{{MismatchNotOnHost, "github", ""}}},
		{"a cloud without sources", map[string]SourceSubscription{"github": on()}, nil,
			[]want{{MismatchNotInCloud, "github", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sub *Subscription
			if tc.host != nil {
				sub = &Subscription{Webhooks: tc.host}
			}
			got := CompareSources(sub, tc.cloud)
			var kinds []want
			for _, m := range got {
				kinds = append(kinds, want{m.Kind, m.Source, m.Nearest})
				require.NotEmpty(t, m.Message)
			}
			require.Equal(t, tc.want, kinds)
		})
	}
}

// TestCompareSourcesMessages: each message names the key of the host's
// configuration, says what happens to the webhooks and what to do.
func TestCompareSourcesMessages(t *testing.T) {
	t.Parallel()
	got := CompareSources(&Subscription{Webhooks: map[string]SourceSubscription{
		"githb":  {Enabled: true},
		"gitlab": {Enabled: true},
		"linear": {Enabled: true},
		"slack":  {Enabled: false},
		"stripe": {Enabled: true, Events: []string{"invoice.paid", "charge.refunded", "customer"}},
	}}, []HostSource{
		{Name: "github", Provider: "github", Enabled: true},
		{Name: "gitlab", Provider: "gitlab", Enabled: true, Events: []string{"merge_request.*", "push"}},
		{Name: "linear", Provider: "linear", Enabled: false},
		{Name: "slack", Provider: "slack", Enabled: true},
		{Name: "stripe", Provider: "stripe", Enabled: true, Events: []string{"invoice", "customer.created"}},
	})
	require.Len(t, got, 6)
	msg := map[string]string{}
	for _, m := range got {
		msg[m.Kind+" "+m.Source] = m.Message
	}
	require.Equal(t, `webhooks.githb: the cloud has no source "githb" for this host, so this handler never runs; `+
		`did you mean "github"? Rename webhooks.githb to webhooks.github in the host's configuration (then reload it: SIGHUP)`,
		msg["not-in-cloud githb"])
	require.Equal(t, `the cloud's source "github" is enabled, and the host's configuration has no webhooks.github: `+
		`its webhooks are still stored and handed to this host, which skips them: each is recorded as skipped (in the host's ledger and in the cloud), `+
		`acked, kept in the cloud for its retention window, and can be replayed once the host handles the source. `+
		`webhooks.githb looks like a typo of it: rename it to webhooks.github`, msg["not-on-host github"])
	require.Contains(t, msg["disabled-in-cloud linear"], `webhooks.linear: the source "linear" is disabled in the cloud, which answers its webhooks 404 and stores none`)
	require.Contains(t, msg["disabled-on-host slack"], `webhooks.slack is disabled in the host's configuration, while the cloud's source "slack" is enabled: its webhooks are still stored and handed to this host, which skips them`)
	require.Contains(t, msg["disabled-on-host slack"], "Enable it in the host's configuration, or disable the source in the cloud")
	require.Equal(t, `webhooks.stripe: the cloud's source "stripe" takes only invoice, customer.created, so it answers charge.refunded "filtered" and stores none: `+
		`what this host would run for them never runs. Add them to the source's events in the cloud, or drop them from the host's configuration`,
		msg["events-not-sent stripe"])
	require.Equal(t, `webhooks.gitlab: the cloud's source "gitlab" has event filter entries that match no webhook: merge_request.* `+
		`(an older cloud stored them): it answers the webhooks they were meant to let through "filtered" and stores none. `+
		`Replace each in the source's events in the cloud: the type alone ("pull_request") takes every action, or list the types`,
		msg["filter-matches-nothing gitlab"])
	for _, m := range got {
		switch m.Kind {
		case MismatchEventsNotSent:
			require.Equal(t, []string{"charge.refunded"}, m.Events)
		case MismatchFilterMatchesNothing:
			require.Equal(t, []string{"merge_request.*"}, m.Events)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"github", "github", 0}, {"", "abc", 3}, {"githb", "github", 1}, {"gihtub", "github", 1},
		{"stirpe", "stripe", 1}, {"slak", "slack", 1}, {"kitten", "sitting", 3}, {"é", "e", 1},
	} {
		require.Equal(t, tc.want, editDistance(tc.a, tc.b), "%q %q", tc.a, tc.b)
		require.Equal(t, tc.want, editDistance(tc.b, tc.a), "%q %q", tc.b, tc.a)
	}
}

// TestHostSourcesJSON: the wire shape, which the OpenAPI document describes.
func TestHostSourcesJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(HostSourcesResponse{Sources: []HostSource{{Name: "github", Provider: "github", Enabled: true, Events: []string{"push"}}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"sources": [{"name": "github", "provider": "github", "enabled": true, "events": ["push"]}]}`, string(b))
}

func TestValidSourceName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"github": true, "stripe-live": true, "a": true, "0x": true, "my_hooks": true,
		strings.Repeat("a", 64): true,
		"":                      false,
		strings.Repeat("a", 65): false,
		"GitHub":                false, // the cloud's names are lower case
		"hooks.prod":            false,
		"_github":               false, // starts with a letter or digit
		"-github":               false,
		"git hub":               false,
		"gïthub":                false,
		"github/x":              false,
	} {
		if got := ValidSourceName(name); got != want {
			t.Errorf("ValidSourceName(%q) = %v, want %v", name, got, want)
		}
	}
}
