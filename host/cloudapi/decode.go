package cloudapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// decodeHeartbeat decodes a heartbeat answer into out. A draining host reads
// megabytes of answers a second, most of it base64 bodies: encoding/json
// scans each twice (validation, then decoding) and decodes every string
// through its generic path. Here the answer is walked once, and each member
// is read directly in the common case (a string without escapes, a base64
// body, an integer) or by json.Unmarshal otherwise, so values are exactly
// what encoding/json gives. Anything the walk cannot read — a broken answer,
// a member of the wrong type — is decoded again by json.Unmarshal, whose
// error is the one returned.
func decodeHeartbeat(data []byte, out *shared.HeartbeatResponse) error {
	if walkHeartbeat(data, out) {
		return nil
	}
	*out = shared.HeartbeatResponse{}
	return json.Unmarshal(data, out)
}

var (
	heartbeatMembers = []string{"status", "heartbeat_interval_s", "more", "webhooks", "now", "lease_s", "poll_while_busy"}
	webhookMembers   = []string{"delivery_id", "source", "event_type", "event_action", "headers", "body",
		"raw_body", "received_at", "attempt", "correlation_id", "raw_body_len"}
)

// decodeHeartbeatJSON decodes a binary heartbeat answer's JSON
// (shared.DecodeHeartbeatJSON), walked as a JSON answer is; anything the
// walk cannot read is decoded again by shared.DecodeHeartbeatJSON, whose
// error is the one returned.
func decodeHeartbeatJSON(part []byte, out *shared.HeartbeatResponse) ([]int, error) {
	lens := make([]int, 0, 64)
	if walkAnswer(part, out, &lens) {
		return lens, nil
	}
	*out = shared.HeartbeatResponse{}
	return shared.DecodeHeartbeatJSON(part, out)
}

func walkHeartbeat(data []byte, out *shared.HeartbeatResponse) bool {
	return walkAnswer(data, out, nil)
}

// walkAnswer reads a heartbeat answer; with lens, a binary answer's JSON
// (walkWebhooks).
func walkAnswer(data []byte, out *shared.HeartbeatResponse, lens *[]int) bool {
	var v [7][]byte
	if !jsonwalk.Fields(data, heartbeatMembers, v[:]) {
		return false
	}
	ok := readString(v[0], &out.Status) && readInt(v[1], &out.HeartbeatIntervalS) && readOther(v[2], &out.More) &&
		readTime(v[4], &out.Now) && readInt(v[5], &out.LeaseS) && readOther(v[6], &out.PollWhileBusy)
	if !ok {
		return false
	}
	switch ws := v[3]; {
	case ws == nil:
		return true
	case ws[0] != '[':
		return readOther(ws, &out.Webhooks) // null, or a type error
	}
	out.Webhooks, ok = walkWebhooks(v[3], lens)
	return ok
}

// walkWebhooks reads a list of webhooks; with lens, each must have a
// raw_body_len (a binary frame's), appended to lens, and no raw_body.
func walkWebhooks(ws []byte, lens *[]int) ([]shared.Webhook, bool) {
	out := make([]shared.Webhook, 0, 64)
	ok := true
	var f [11][]byte
	walked := jsonwalk.Elements(ws, func(e []byte) {
		if !ok {
			return
		}
		var w shared.Webhook
		if len(e) == 0 || e[0] != '{' || !jsonwalk.Fields(e, webhookMembers, f[:]) {
			// null is a zero webhook in a heartbeat's answer; anything
			// else fails
			ok = lens == nil && readOther(e, &w)
			out = append(out, w)
			return
		}
		ok = readString(f[0], &w.DeliveryID) && readString(f[1], &w.Source) && readString(f[2], &w.EventType) &&
			readString(f[3], &w.EventAction) && readHeaders(f[4], &w.Headers) && readOther(f[5], &w.Body) &&
			readTime(f[7], &w.ReceivedAt) && readInt(f[8], &w.Attempt) && readString(f[9], &w.CorrelationID)
		if lens == nil {
			ok = ok && readBytes(f[6], &w.RawBody)
		} else {
			n := -1
			ok = ok && f[6] == nil && f[10] != nil && readInt(f[10], &n) && n >= 0
			*lens = append(*lens, n)
		}
		out = append(out, w)
	})
	return out, walked && ok
}

// plainString is the content of a JSON string that means its bytes (no
// escapes, valid UTF-8), or false.
func plainString(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') >= 0 || !utf8.Valid(s) {
		return nil, false
	}
	for _, c := range s {
		if c < 0x20 {
			return nil, false // not valid JSON: let encoding/json say so
		}
	}
	return s, true
}

func readString(raw []byte, dst *string) bool {
	if raw == nil {
		return true
	}
	if s, ok := plainString(raw); ok {
		*dst = string(s)
		return true
	}
	return readOther(raw, dst)
}

func readInt(raw []byte, dst *int) bool {
	if raw == nil {
		return true
	}
	if n, err := strconv.Atoi(string(raw)); err == nil && (raw[0] != '0' || len(raw) == 1) && raw[0] != '+' {
		*dst = n
		return true
	}
	return readOther(raw, dst)
}

func readBytes(raw []byte, dst *[]byte) bool {
	if raw == nil {
		return true
	}
	// Base64 has no escapes; the decoder refuses any other byte.
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		s := raw[1 : len(raw)-1]
		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		if n, err := base64.StdEncoding.Strict().Decode(b, s); err == nil {
			*dst = b[:n]
			return true
		}
	}
	return readOther(raw, dst)
}

func readTime(raw []byte, dst *time.Time) bool {
	if raw == nil {
		return true
	}
	return dst.UnmarshalJSON(raw) == nil
}

func readHeaders(raw []byte, dst *map[string]string) bool {
	if raw == nil {
		return true
	}
	m, err := jsonwalk.Strings(raw)
	if err != nil {
		return false
	}
	*dst = m
	return true
}

// readOther decodes one member with encoding/json.
func readOther(raw []byte, dst any) bool {
	return raw == nil || json.Unmarshal(raw, dst) == nil
}
