package verify

import (
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// slack verifies X-Slack-Signature: "v0=" + hex HMAC-SHA256 of
// "v0:{X-Slack-Request-Timestamp}:{body}" keyed with the signing secret, the
// timestamp within 5 minutes either way. Form bodies (slash commands,
// interactivity's payload=) are verified over their raw bytes like JSON ones.
// Retries carry X-Slack-Retry-Num and a fresh timestamp and signature; the
// event id dedupes them.
//
// Event, by kind of request:
//   - Events API (JSON event_callback): id event_id, type event.type,
//     action event.subtype (e.g. message / bot_message);
//   - interactivity (form, payload=<JSON>): type the payload's type
//     (block_actions, view_submission, shortcut…), action its callback_id,
//     view.callback_id or first action_id, id trigger_id;
//   - slash commands (form): type "slash_command", action the command
//     without its slash, id trigger_id;
//   - anything else: the body's type (url_verification, app_rate_limited).
//
// Where no id applies, the body hash.
type slack struct{ profile }

const slackTolerance = 5 * time.Minute

func (slack) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	sig, stamp := r.Header.Get("X-Slack-Signature"), r.Header.Get("X-Slack-Request-Timestamp")
	if sig == "" {
		return ErrMissingSignature
	}
	if stamp == "" {
		return fmt.Errorf("X-Slack-Request-Timestamp absent: %w", ErrMissingSignature)
	}
	ts, ok := parseUnix(stamp)
	if !ok {
		return fmt.Errorf("X-Slack-Request-Timestamp is not Unix seconds: %w", ErrMalformed)
	}
	want, err := prefixedHex(sig, "v0=", 32)
	if err != nil {
		return fmt.Errorf("X-Slack-Signature: %w", err)
	}
	err = anySecret(secrets, func(s []byte) bool {
		return hmac.Equal(hmacSHA256(s, []byte("v0:"), []byte(stamp), []byte(":"), r.Body), want)
	})
	if err != nil {
		return err
	}
	return checkWindow(r.now(), ts, slackTolerance)
}

func (slack) Event(r *Request, _ map[string]string) Event {
	if isForm(r.Header) {
		form := formValues(r.Body)
		if p := form.Get("payload"); p != "" {
			f := jsonObject([]byte(p))
			return Event{
				ID:     idOrHash(f.str("trigger_id"), r.Body),
				Type:   f.str("type"),
				Action: firstOf(f.str("callback_id"), f.str("view", "callback_id"), f.str("actions", "0", "action_id"), f.str("action_id")),
			}
		}
		if cmd := form.Get("command"); cmd != "" {
			return Event{
				ID:     idOrHash(form.Get("trigger_id"), r.Body),
				Type:   "slash_command",
				Action: strings.TrimPrefix(cmd, "/"),
			}
		}
		if form.Get("ssl_check") != "" {
			return Event{ID: BodyHashID(r.Body), Type: "ssl_check"}
		}
		return Event{ID: BodyHashID(r.Body)}
	}
	f := jsonObject(r.Body)
	if f.str("type") == "event_callback" {
		return Event{
			ID:     idOrHash(f.str("event_id"), r.Body),
			Type:   f.str("event", "type"),
			Action: f.str("event", "subtype"),
			Note:   slackRetryNote(r.Header),
		}
	}
	return Event{ID: idOrHash(f.str("event_id"), r.Body), Type: f.str("type")}
}

// slackRetryNote records Slack's retry counter and reason (Events API
// retries carry X-Slack-Retry-Num and X-Slack-Retry-Reason).
func slackRetryNote(h http.Header) string {
	n := h.Get("X-Slack-Retry-Num")
	if n == "" {
		return ""
	}
	if reason := h.Get("X-Slack-Retry-Reason"); reason != "" {
		return "slack retry " + n + " (" + reason + ")"
	}
	return "slack retry " + n
}

// Handshake answers url_verification with its challenge as JSON, and a slash
// command's ssl_check probe with an empty 200; neither is stored.
func (slack) Handshake(r *Request) (*Reply, bool) {
	if isForm(r.Header) {
		if formValues(r.Body).Get("ssl_check") != "" {
			return &Reply{Status: 200}, true
		}
		return nil, false
	}
	f := jsonObject(r.Body)
	if f.str("type") != "url_verification" {
		return nil, false
	}
	challenge := f.str("challenge")
	if challenge == "" {
		return &Reply{Status: 400, ContentType: "text/plain; charset=utf-8", Body: []byte("url_verification without a challenge\n")}, true
	}
	body, _ := json.Marshal(map[string]string{"challenge": challenge})
	return &Reply{Status: 200, ContentType: "application/json", Body: body}, true
}

// SentHeaders: the signature, its timestamp and the retry headers.
func (slack) SentHeaders(map[string]string) []string {
	return []string{"X-Slack-Signature", "X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "X-Slack-Retry-Reason"}
}

func (slack) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("slack", opts)
}
