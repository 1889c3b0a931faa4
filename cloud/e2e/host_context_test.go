package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostThreadContextReachesExec sends a Slack thread reply, a Slack
// top-level message and a GitHub pull_request (real payloads, signed the
// providers' ways) through the cloud; each reaches its exec handler with the
// payload on stdin and the fields an agent needs to answer in the right
// place in its environment, and the ledger keeps the same summary.
func TestHostThreadContextReachesExec(t *testing.T) {
	t.Parallel()
	const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	s := newHostSetup(t, "context")
	require.Equal(t, 201, s.cloud.admin("PUT", "/api/hosts/"+s.hostID+"/sources/slack",
		map[string]any{"secrets": []string{slackSecret}}, nil))
	out := t.TempDir()
	dump := script(t, `env | grep -E '^(RELAY_|IDEMPOTENCY_KEY=)' | sort > "$1/$RELAY_DELIVERY_ID.env"
cat > "$1/$RELAY_DELIVERY_ID.body"
`)
	h := s.startConfiguredHost(t, s.cloud.url, map[string]any{"webhooks": map[string]any{
		"slack":  map[string]any{"enabled": true, "routes": []any{map[string]any{"events": []string{"message", "app_mention"}, "exec": []string{dump, out}}}},
		"github": map[string]any{"enabled": true, "events": []string{"pull_request"}, "exec": []string{dump, out}},
	}}, "RELAY_SLACK_TEAM=inherited-must-not-leak")

	reply := hostPayload(t, "slack/event_callback.message.thread_reply.json")
	parent := hostPayload(t, "slack/event_callback.message.json")
	pr := hostPayload(t, "github/pull_request.opened.json")
	replyID := sendSlack(t, s.cloud.url, s.hostID, "slack", slackSecret, reply)
	parentID := sendSlack(t, s.cloud.url, s.hostID, "slack", slackSecret, parent)
	prID := sendGitHub(t, s.cloud.url, s.hostID, "pull_request", "ctx-pr-1", pr)

	env := func(id string) map[string]string {
		b, err := os.ReadFile(filepath.Join(out, id+".env"))
		require.NoError(t, err)
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			m[k] = v
		}
		return m
	}
	eventually(t, 30*time.Second, "all three acked", func() bool {
		for _, id := range []string{replyID, parentID, prID} {
			if s.cloud.delivery(s.hostID, id).Delivery.Status != "acked" {
				return false
			}
		}
		return true
	})
	for id, body := range map[string][]byte{replyID: reply, parentID: parent, prID: pr} {
		got, err := os.ReadFile(filepath.Join(out, id+".body"))
		require.NoError(t, err)
		require.Equal(t, body, got, "payload on stdin, byte-exact")
	}

	// A reply in a thread: answer in the thread's parent.
	e := env(replyID)
	for k, v := range map[string]string{
		"RELAY_SOURCE": "slack", "RELAY_EVENT_TYPE": "message", "RELAY_DELIVERY_ID": replyID,
		"IDEMPOTENCY_KEY": replyID, "RELAY_ATTEMPT": "1",
		"RELAY_SLACK_TEAM": "T043DB835ML", "RELAY_SLACK_CHANNEL": "C043YJGBY49", "RELAY_SLACK_USER": "U0442US8QGH",
		"RELAY_SLACK_TS": "1664216870.477049", "RELAY_SLACK_THREAD_TS": "1664216109.798919",
		"RELAY_SLACK_EVENT_TYPE": "message",
		"RELAY_SUMMARY":          "message in C043YJGBY49 thread 1664216109.798919 by U0442US8QGH",
	} {
		require.Equal(t, v, e[k], "thread reply: %s", k)
	}
	require.NotEmpty(t, e["RELAY_CORRELATION_ID"])

	// A top-level message is the parent of its own thread: thread_ts = ts.
	e = env(parentID)
	require.Equal(t, "1663966382.046509", e["RELAY_SLACK_TS"])
	require.Equal(t, "1663966382.046509", e["RELAY_SLACK_THREAD_TS"])
	require.Equal(t, "U043H11ES4V", e["RELAY_SLACK_USER"])
	require.Equal(t, "T043DB835ML", e["RELAY_SLACK_TEAM"], "the webhook's team, not the host's inherited variable")

	e = env(prID)
	for k, v := range map[string]string{
		"RELAY_SOURCE": "github", "RELAY_EVENT_TYPE": "pull_request", "RELAY_EVENT_ACTION": "opened",
		"RELAY_GITHUB_REPO": "Codertocat/Hello-World", "RELAY_GITHUB_NUMBER": "2", "RELAY_GITHUB_BRANCH": "changes",
		"RELAY_GITHUB_SENDER": "Codertocat", "RELAY_GITHUB_ACTION": "opened",
		"RELAY_GITHUB_SHA": "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
		"RELAY_GITHUB_URL": "https://github.com/Codertocat/Hello-World/pull/2",
	} {
		require.Equal(t, v, e[k], "pull_request: %s", k)
	}
	_, slackLeak := e["RELAY_SLACK_TEAM"]
	require.False(t, slackLeak, "a field the webhook lacks is absent, not inherited")

	// The ledger keeps the same summary and fields, visible in the local API.
	le := mustLedger(t, h, replyID)
	require.Equal(t, "message in C043YJGBY49 thread 1664216109.798919 by U0442US8QGH", le.Summary)
	require.Equal(t, "1664216109.798919", le.Fields["slack.thread_ts"])
	le = mustLedger(t, h, prID)
	require.Equal(t, "pull_request.opened Codertocat/Hello-World #2 (changes) by Codertocat", le.Summary)
	require.Equal(t, "2", le.Fields["github.number"])

	// The host's own filters (github wants pull_request only, slack what
	// its one route takes) do not make the cloud drop anything: the
	// webhooks are stored and handed over, and the host skips them, saying
	// why, beside the delivery in the cloud.
	pushID := sendGitHub(t, s.cloud.url, s.hostID, "push", "ctx-push-1", hostPayload(t, "github/push.json"))
	reactionID := sendSlack(t, s.cloud.url, s.hostID, "slack", slackSecret, hostPayload(t, "slack/event_callback.reaction_added.json"))
	for id, why := range map[string]string{
		pushID:     `event "push" is not among source "github"'s events in this host's configuration`,
		reactionID: `no route of source "slack" takes event "reaction_added"`,
	} {
		eventually(t, 30*time.Second, id+" skipped and acked", func() bool {
			d := s.cloud.delivery(s.hostID, id)
			return d.Delivery.Status == "acked" && d.HostResult != nil
		})
		d := s.cloud.delivery(s.hostID, id)
		require.Equal(t, "skipped", d.HostResult.Result)
		require.Equal(t, why, d.HostResult.Error)
		require.Equal(t, "skipped", mustLedger(t, h, id).Result)
	}
}
