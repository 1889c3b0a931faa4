package verify

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func slackRequest(body []byte, contentType string) (*Request, [][]byte) {
	s := signers["slack"]
	r := s.request(0, body, testNow)
	r.Header.Set("Content-Type", contentType)
	return r, [][]byte{s.secrets[0]}
}

const formType = "application/x-www-form-urlencoded"

func TestSlackHeaders(t *testing.T) {
	p, _ := Lookup("slack")
	r, secrets := slackRequest([]byte(`{"type":"event_callback"}`), "application/json")
	r.Header.Set("X-Slack-Retry-Num", "2")
	r.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	require.NoError(t, p.Verify(r, secrets, nil), "a retry is verified like the first attempt")

	r.Header.Set("X-Slack-Request-Timestamp", "1700000000.5")
	require.ErrorIs(t, p.Verify(r, secrets, nil), ErrMalformed)
	r.Header.Set("X-Slack-Request-Timestamp", "1700000001")
	require.ErrorIs(t, p.Verify(r, secrets, nil), ErrMismatch, "the timestamp is signed")
}

// Slash commands and interactivity are forms, signed over the raw bytes: the
// same fields encoded otherwise do not verify.
func TestSlackForms(t *testing.T) {
	p, _ := Lookup("slack")
	body := []byte("payload=%7B%22type%22%3A%22block_actions%22%2C%22trigger_id%22%3A%2213345.abc%22%2C%22actions%22%3A%5B%7B%22action_id%22%3A%22approve%22%7D%5D%7D")
	r, secrets := slackRequest(body, formType)
	require.NoError(t, p.Verify(r, secrets, nil))
	r.Body = bytes.ReplaceAll(body, []byte("%7B"), []byte("%7b")) // the same form, other bytes
	same, err := url.ParseQuery(string(r.Body))
	require.NoError(t, err)
	orig, _ := url.ParseQuery(string(body))
	require.Equal(t, orig, same)
	require.ErrorIs(t, p.Verify(r, secrets, nil), ErrMismatch)
}

func TestSlackEvent(t *testing.T) {
	p, _ := Lookup("slack")
	_, r := findVector(t, "slack.json", "event-callback-thread-reply")
	require.Equal(t, Event{ID: "Ev0001ABCD", Type: "message"}, p.Event(r, nil))

	_, r = findVector(t, "slack.json", "docs-slash-command-valid")
	require.Equal(t, Event{ID: "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", Type: "slash_command", Action: "webhook-collect"}, p.Event(r, nil))

	_, r = findVector(t, "slack.json", "url-verification-signed")
	require.Equal(t, Event{ID: BodyHashID(r.Body), Type: "url_verification"}, p.Event(r, nil))

	interaction := func(payload string) *Request {
		r, _ := slackRequest([]byte("payload="+url.QueryEscape(payload)), formType)
		return r
	}
	cases := []struct {
		r    *Request
		want Event
	}{
		{request(map[string]string{"Content-Type": "application/json"}, []byte(`{"type":"event_callback","event_id":"Ev9","event":{"type":"message","subtype":"bot_message"}}`)),
			Event{ID: "Ev9", Type: "message", Action: "bot_message"}},
		{request(nil, []byte(`{"type":"app_rate_limited","minute_rate_limited":1518467820}`)),
			Event{ID: BodyHashID([]byte(`{"type":"app_rate_limited","minute_rate_limited":1518467820}`)), Type: "app_rate_limited"}},
		{interaction(`{"type":"block_actions","trigger_id":"t1","actions":[{"action_id":"approve"},{"action_id":"deny"}]}`),
			Event{ID: "t1", Type: "block_actions", Action: "approve"}},
		{interaction(`{"type":"view_submission","trigger_id":"t2","view":{"callback_id":"signup"}}`),
			Event{ID: "t2", Type: "view_submission", Action: "signup"}},
		{interaction(`{"type":"shortcut","trigger_id":"t3","callback_id":"new_ticket"}`),
			Event{ID: "t3", Type: "shortcut", Action: "new_ticket"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, p.Event(c.r, nil))
	}
	noTrigger := interaction(`{"type":"view_closed","view":{"callback_id":"signup"}}`)
	require.Equal(t, Event{ID: BodyHashID(noTrigger.Body), Type: "view_closed", Action: "signup"}, p.Event(noTrigger, nil))
}

func TestSlackHandshake(t *testing.T) {
	p, _ := Lookup("slack")
	h := p.(Handshaker)

	_, r := findVector(t, "slack.json", "url-verification-signed")
	reply, ok := h.Handshake(r)
	require.True(t, ok)
	require.Equal(t, 200, reply.Status)
	require.Equal(t, "application/json", reply.ContentType)
	var got map[string]string
	require.NoError(t, json.Unmarshal(reply.Body, &got))
	require.Equal(t, map[string]string{"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}, got)

	reply, ok = h.Handshake(request(nil, []byte(`{"type":"url_verification","token":"x"}`)))
	require.True(t, ok, "a url_verification without challenge is still not an event")
	require.Equal(t, 400, reply.Status)

	ssl, _ := slackRequest([]byte("ssl_check=1&token=xyz"), formType)
	reply, ok = h.Handshake(ssl)
	require.True(t, ok)
	require.Equal(t, &Reply{Status: 200}, reply)

	for _, name := range []string{"event-callback-thread-reply", "docs-slash-command-valid"} {
		_, r := findVector(t, "slack.json", name)
		_, ok := h.Handshake(r)
		require.False(t, ok, name)
	}
	_, ok = h.Handshake(request(nil, []byte("not json")))
	require.False(t, ok)
}
