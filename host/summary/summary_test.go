package summary

import (
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// hook is a webhook as the cloud hands it out: Body set only for JSON.
func hook(source, eventType, action string, body []byte, headers map[string]string) shared.Webhook {
	w := shared.Webhook{Source: source, EventType: eventType, EventAction: action, RawBody: body, Headers: headers}
	if json.Valid(body) {
		w.Body = body
	}
	return w
}

func TestGitHub(t *testing.T) {
	t.Parallel()
	gh := map[string]string{"x-github-event": "x"}
	// pr2 is the fields of the fixtures about pull request #2 of
	// Codertocat/Hello-World, with more of the fixture's own.
	pr2 := func(more map[string]string) map[string]string {
		f := map[string]string{"github.repo": "Codertocat/Hello-World", "github.number": "2", "github.branch": "changes",
			"github.sha": "ec26c3e57ca3a959ca5aad62de7213c562f8c821", "github.sender": "Codertocat"}
		maps.Copy(f, more)
		return f
	}
	for _, tc := range []struct {
		file, eventType, action string
		text                    string
		fields                  map[string]string
	}{
		{"github/pull_request.opened.json", "pull_request", "opened",
			"pull_request.opened Codertocat/Hello-World #2 (changes) by Codertocat",
			pr2(map[string]string{"github.action": "opened", "github.url": "https://github.com/Codertocat/Hello-World/pull/2"})},
		{"github/push.json", "push", "",
			"push Codertocat/Hello-World (master) by Codertocat",
			map[string]string{
				"github.repo": "Codertocat/Hello-World", "github.branch": "master",
				"github.sha": "6113728f27ae82c7b1a177c8d03f9e96e0adf246", "github.sender": "Codertocat",
			}},
		{"github/check_run.completed.json", "check_run", "completed",
			"check_run.completed Codertocat/Hello-World #2 (changes) success by Codertocat",
			pr2(map[string]string{"github.action": "completed", "github.conclusion": "success",
				"github.url": "https://github.com/Codertocat/Hello-World/runs/128620228"})},
		{"github/check_suite.completed.json", "check_suite", "completed",
			"check_suite.completed Codertocat/Hello-World #2 (changes) success by Codertocat",
			pr2(map[string]string{"github.action": "completed", "github.conclusion": "success"})},
		{"github/issue_comment.created.json", "issue_comment", "created",
			"issue_comment.created Codertocat/Hello-World #1 by Codertocat",
			map[string]string{
				"github.repo": "Codertocat/Hello-World", "github.number": "1", "github.action": "created",
				"github.sender": "Codertocat", "github.url": "https://github.com/Codertocat/Hello-World/issues/1",
			}},
		{"github/workflow_run.completed.json", "workflow_run", "completed",
			"workflow_run.completed octo-org/octo-repo (master) success by Codertocat",
			map[string]string{
				"github.repo": "octo-org/octo-repo", "github.branch": "master",
				"github.sha": "3484a3fb816e0859fd6e1cea078d76385ff50625", "github.action": "completed",
				"github.sender": "Codertocat", "github.conclusion": "success",
				"github.url": "https://github.com/octo-org/octo-repo/actions/runs/289782451",
			}},
	} {
		s := Of(hook("gh-main", tc.eventType, tc.action, fixture(t, tc.file), gh), "")
		require.Equal(t, GitHub, s.Provider, tc.file)
		require.Equal(t, tc.text, s.Text, tc.file)
		require.Equal(t, tc.fields, s.Fields, tc.file)
	}
}

func TestGitHubDeletedBranchHasNoSHA(t *testing.T) {
	t.Parallel()
	body := []byte(`{"ref":"refs/heads/gone","after":"0000000000000000000000000000000000000000","deleted":true,
		"repository":{"full_name":"acme/app"},"sender":{"login":"bob"}}`)
	s := Of(hook("github", "push", "", body, nil), "")
	require.Equal(t, map[string]string{"github.repo": "acme/app", "github.branch": "gone", "github.sender": "bob"}, s.Fields)

	body = []byte(`{"ref":"feature-x","ref_type":"branch","repository":{"full_name":"acme/app"}}`)
	s = Of(hook("github", "create", "", body, nil), "")
	require.Equal(t, "feature-x", s.Fields["github.branch"])
}

func TestStripe(t *testing.T) {
	t.Parallel()
	st := map[string]string{"stripe-signature": "t=1,v1=x"}
	s := Of(hook("billing", "invoice.paid", "", fixture(t, "stripe/invoice.paid.json"), st), "")
	require.Equal(t, Stripe, s.Provider)
	require.Equal(t, "invoice.paid in_1Pgc6tB7WZ01zgkWu9fdqL6I", s.Text)
	require.Equal(t, map[string]string{
		"stripe.event_id": "evt_fixture_invoice_paid", "stripe.type": "invoice.paid",
		"stripe.object_id": "in_1Pgc6tB7WZ01zgkWu9fdqL6I", "stripe.object": "invoice",
		"stripe.customer": "cus_QXg1o8vcGmoR32",
	}, s.Fields)

	// Detected by the source's name when the headers say nothing.
	s = Of(hook("stripe", "customer.updated", "", fixture(t, "stripe/customer.updated.json"), nil), "")
	require.Equal(t, map[string]string{
		"stripe.event_id": "evt_1DHsSdKCFFPkgtRhy4YMdffC", "stripe.type": "customer.updated",
		"stripe.object_id": "cus_DjL8lObxrWj04W", "stripe.object": "customer",
	}, s.Fields)
}

func TestSlack(t *testing.T) {
	t.Parallel()
	sl := map[string]string{"x-slack-signature": "v0=x", "x-slack-request-timestamp": "1"}
	for _, tc := range []struct {
		source, eventType, file string
		headers                 map[string]string
		text                    string
		fields                  map[string]string
	}{
		// A reply in a thread: answers go to the thread's parent.
		{"team-chat", "event_callback", "slack/event_callback.message.thread_reply.json", sl,
			"event_callback message in C043YJGBY49 thread 1664216109.798919 by U0442US8QGH",
			map[string]string{
				"slack.team": "T043DB835ML", "slack.channel": "C043YJGBY49", "slack.user": "U0442US8QGH",
				"slack.ts": "1664216870.477049", "slack.thread_ts": "1664216109.798919", "slack.event_type": "message",
			}},
		// A top-level message starts its own thread: thread_ts = ts. Detected
		// by the source's name when the headers say nothing.
		{"slack", "message", "slack/event_callback.message.json", nil,
			"message in C043YJGBY49 thread 1663966382.046509 by U043H11ES4V",
			map[string]string{
				"slack.team": "T043DB835ML", "slack.channel": "C043YJGBY49", "slack.user": "U043H11ES4V",
				"slack.ts": "1663966382.046509", "slack.thread_ts": "1663966382.046509", "slack.event_type": "message",
			}},
		// A reaction points at a message; no thread is implied.
		{"slack", "event_callback", "slack/event_callback.reaction_added.json", sl,
			"event_callback reaction_added in D2AQCJCQ2 by U27FFLNF4",
			map[string]string{
				"slack.team": "T0JFD6M53", "slack.channel": "D2AQCJCQ2", "slack.user": "U27FFLNF4",
				"slack.ts": "1477958101.000004", "slack.event_type": "reaction_added",
			}},
		// A slash command is form-encoded.
		{"slack", "", "slack/slash_command.form-urlencoded.txt", sl,
			"slash_command in G8PSS9T3V by U2CERLKJA",
			map[string]string{
				"slack.team": "T1DC2JH3J", "slack.channel": "G8PSS9T3V", "slack.user": "U2CERLKJA",
				"slack.event_type": "slash_command",
			}},
	} {
		s := Of(hook(tc.source, tc.eventType, "", fixture(t, tc.file), tc.headers), "")
		require.Equal(t, Slack, s.Provider, tc.file)
		require.Equal(t, tc.fields, s.Fields, tc.file)
		require.Equal(t, tc.text, s.Text, tc.file)
	}
}

func TestSlackEditedMessageAndInteractivity(t *testing.T) {
	t.Parallel()
	edited := []byte(`{"team_id":"T1","event":{"type":"message","subtype":"message_changed","channel":"C1",
		"ts":"200.000001","message":{"user":"U1","ts":"100.000001","thread_ts":"50.000001"}}}`)
	s := Of(hook("slack", "event_callback", "", edited, nil), "")
	require.Equal(t, "100.000001", s.Fields["slack.ts"])
	require.Equal(t, "50.000001", s.Fields["slack.thread_ts"])
	require.Equal(t, "U1", s.Fields["slack.user"])

	payload := `{"type":"block_actions","team":{"id":"T9"},"channel":{"id":"C9"},"user":{"id":"U9"},"message":{"ts":"7.000001"}}`
	form := []byte("payload=" + url.QueryEscape(payload))
	s = Of(hook("slack", "", "", form, nil), "")
	require.Equal(t, map[string]string{
		"slack.team": "T9", "slack.channel": "C9", "slack.user": "U9",
		"slack.ts": "7.000001", "slack.thread_ts": "7.000001", "slack.event_type": "block_actions",
	}, s.Fields)
}

func TestHintAndFallbacks(t *testing.T) {
	t.Parallel()
	body := fixture(t, "github/pull_request.opened.json")
	// "none" turns parsing off even for a GitHub payload.
	s := Of(hook("github", "pull_request", "opened", body, map[string]string{"x-github-event": "pull_request"}), None)
	require.Equal(t, Summary{Text: "pull_request.opened", Fields: map[string]string{}}, s)

	// An unknown source with no provider headers is not parsed.
	s = Of(hook("internal", "deploy", "", []byte(`{"repository":{"full_name":"x/y"}}`), nil), "")
	require.Equal(t, "", s.Provider)
	require.Equal(t, "deploy", s.Text)
	require.Empty(t, s.Fields)

	// Not JSON: the event type alone.
	s = Of(hook("github", "push", "", []byte("a=b"), nil), "")
	require.Equal(t, "push", s.Text)
	require.Empty(t, s.Fields)

	// Values are cleaned for the environment: no NUL, bounded.
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'a'
	}
	s = Of(hook("github", "push", "", []byte(`{"repository":{"full_name":"a\u0000b"},"sender":{"login":"`+string(long)+`"}}`), nil), "")
	require.Equal(t, "ab", s.Fields["github.repo"])
	require.Len(t, s.Fields["github.sender"], maxValue)
}

func TestEnv(t *testing.T) {
	t.Parallel()
	s := Summary{Fields: map[string]string{"slack.thread_ts": "1.2", "slack.channel": "C1", "github.repo": "a/b"}}
	require.Equal(t, []string{"RELAY_GITHUB_REPO=a/b", "RELAY_SLACK_CHANNEL=C1", "RELAY_SLACK_THREAD_TS=1.2"}, s.Env())
	require.True(t, Known("slack"))
	require.False(t, Known("gitlab"))
}

// TestStrMatchesJSONDecoding: the fast paths of str read strings and numbers
// exactly as decoding them would.
func TestStrMatchesJSONDecoding(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`"acme/app"`, `""`, `"Ünïcødé ✓ 日本語"`, `"a\"b"`, `"tab\tand \u00e9 \ud83d\ude00"`, `"back\\slash"`,
		"\"bad \xff utf-8\"", ` "padded" `,
		`7`, `-12`, `1.5e3`, `0`, `12345678901234567890`,
	} {
		var v any
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&v), raw)
		want := ""
		switch v := v.(type) {
		case string:
			want = v
		case json.Number:
			want = v.String()
		}
		require.Equal(t, want, str(json.RawMessage(raw)), raw)
	}
	for _, raw := range []string{`null`, `true`, `false`, `{"a":1}`, `[1]`, ``, `  `} {
		require.Empty(t, str(json.RawMessage(raw)), raw)
	}
}
