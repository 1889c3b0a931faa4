package agent

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		w    shared.Webhook
		want string
	}{
		{"github pr", shared.Webhook{EventType: "pull_request", EventAction: "opened",
			Body: json.RawMessage(`{"repository":{"full_name":"acme/app"},"pull_request":{"number":42}}`)},
			"pull_request.opened: acme/app #42"},
		{"github push from raw body", shared.Webhook{EventType: "push",
			RawBody: []byte(`{"repository":{"full_name":"acme/app"},"ref":"refs/heads/main"}`)},
			"push: acme/app refs/heads/main"},
		{"slack thread", shared.Webhook{EventType: "event_callback",
			Body: json.RawMessage(`{"event":{"channel":"C1","ts":"1.2","thread_ts":"1.0"}}`)},
			"event_callback: channel C1 thread 1.0"},
		{"stripe", shared.Webhook{EventType: "invoice.paid",
			Body: json.RawMessage(`{"type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)},
			"invoice.paid: in_1"},
		{"not json", shared.Webhook{EventType: "form", RawBody: []byte("a=b")}, "form"},
	} {
		require.Equal(t, tc.want, summarize(tc.w), tc.name)
	}
}
