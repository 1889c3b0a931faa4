package shared

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "github:" + strconv.Itoa(i) + ":1"
	}
	return out
}

// A heartbeat and a socket's report are held to the same rules and the
// same bound: MaxReportItems acks, nacks and extends together, as many
// held webhooks.
func TestReportBoundTheSameOnBothTransports(t *testing.T) {
	at := ids(MaxReportItems)
	over := ids(MaxReportItems + 1)
	zero := Ptr(0)

	require.NoError(t, (&HeartbeatRequest{WebhookAcks: at[:2], WebhookNacks: []Nack{{DeliveryID: "n"}}, WebhookExtends: at[3:]}).Validate())
	require.NoError(t, (&Frame{Type: FrameReport, Acks: at[:2], Nacks: []Nack{{DeliveryID: "n"}}, Extends: at[3:]}).Validate())
	require.ErrorContains(t, (&HeartbeatRequest{WebhookAcks: over}).Validate(), "at most 5000")
	require.ErrorContains(t, (&Frame{Type: FrameReport, Extends: over}).Validate(), "at most 5000")
	require.ErrorContains(t, (&Frame{Type: FrameReport, Acks: at, Nacks: []Nack{{DeliveryID: "n"}}}).Validate(), "at most 5000")

	require.NoError(t, (&HeartbeatRequest{AnswerLost: true, WebhooksHeld: at, MaxWebhooks: zero}).Validate())
	require.NoError(t, (&Frame{Type: FrameHello, Held: at}).Validate())
	require.ErrorContains(t, (&HeartbeatRequest{AnswerLost: true, WebhooksHeld: over}).Validate(), "holds 5001 webhooks, at most 5000")
	require.ErrorContains(t, (&Frame{Type: FrameHello, Held: over}).Validate(), "holds 5001 webhooks, at most 5000")
}

func TestReportRefused(t *testing.T) {
	ok := WebhookResult{DeliveryID: "a", Result: "success"}
	for name, c := range map[string]struct {
		hb   HeartbeatRequest
		f    Frame
		want string // in both errors, but for the heartbeat's own
	}{
		"empty ack":      {HeartbeatRequest{WebhookAcks: []string{"a", ""}}, Frame{Acks: []string{"a", ""}}, "acks[1] is empty"},
		"empty extend":   {HeartbeatRequest{WebhookExtends: []string{""}}, Frame{Extends: []string{""}}, "extends[0] is empty"},
		"empty nack":     {HeartbeatRequest{WebhookNacks: []Nack{{}}}, Frame{Nacks: []Nack{{}}}, "nacks[0].delivery_id is empty"},
		"extra result":   {HeartbeatRequest{WebhookAcks: []string{"a"}, WebhookResults: []WebhookResult{ok, ok}}, Frame{Acks: []string{"a"}, Results: []WebhookResult{ok, ok}}, "than acks and nacks"},
		"bad result":     {HeartbeatRequest{WebhookAcks: []string{"a"}, WebhookResults: []WebhookResult{{DeliveryID: "a", Result: "done"}}}, Frame{Acks: []string{"a"}, Results: []WebhookResult{{DeliveryID: "a", Result: "done"}}}, "success, error or skipped"},
		"no result id":   {HeartbeatRequest{WebhookAcks: []string{"a"}, WebhookResults: []WebhookResult{{Result: "error"}}}, Frame{Acks: []string{"a"}, Results: []WebhookResult{{Result: "error"}}}, "want a delivery_id"},
		"empty held":     {HeartbeatRequest{AnswerLost: true, WebhooksHeld: []string{""}}, Frame{Type: FrameHello, Held: []string{""}}, "held[0] is empty"},
		"negative max":   {HeartbeatRequest{MaxWebhooks: Ptr(-1)}, Frame{}, "max_webhooks must not be negative"},
		"negative wait":  {HeartbeatRequest{WaitS: -1}, Frame{}, "wait_s must not be negative"},
		"stopping":       {HeartbeatRequest{Stopping: true}, Frame{}, "a stopping heartbeat takes no work"},
		"held, not lost": {HeartbeatRequest{WebhooksHeld: []string{"a"}}, Frame{}, "only sent with answer_lost"},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorContains(t, c.hb.Validate(), c.want)
			if c.f.Type == "" && len(c.f.Acks)+len(c.f.Nacks)+len(c.f.Extends) == 0 {
				return // the heartbeat's own
			}
			if c.f.Type == "" {
				c.f.Type = FrameReport
			}
			require.ErrorContains(t, c.f.Validate(), c.want)
		})
	}
	require.NoError(t, (&Frame{Type: FrameCredit, Acks: []string{""}}).Validate(), "checked where applied")
}
