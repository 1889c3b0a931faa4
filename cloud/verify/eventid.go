package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/relaykit/relay/shared"
)

// An event id is chosen by the provider (a header, a body member), and it
// travels far: into the delivery id {source}:{event_id}:{received_ms}, the
// admin API's paths, the host's X-Relay-Delivery-Id and Idempotency-Key
// headers, its RELAY_DELIVERY_ID variable, log lines and terminals. So it is
// kept to what every one of those takes as is: at most MaxEventIDLen bytes of
//
//	A-Z a-z 0-9 . _ ~ - : @ + = /
//
// — the unreserved characters of RFC 3986 and the few path characters ids
// really use (':' and '@' in Slack's and Twilio's ids, '+', '=' and '/' of
// base64 idempotency keys; '/' is sent escaped as %2F in admin API paths).
// No space, no control character, nothing a header, an environment variable,
// a shell word or a log line would have to quote. Every provider's own ids
// (UUIDs, evt_…, Ev…, msg_…, numbers) are within it.
//
// Any other id is replaced by SafeEventID's hash of it: the same id always
// gives the same safe id, so a provider's retries are still duplicates.
const MaxEventIDLen = 128

// maxNoteLen bounds an event's note.
const maxNoteLen = 200

// EventOf is the provider's event for a verified request, made safe to
// carry: the id as SafeEventID makes it (a hash of the body where the
// provider sent none), type, action and note without control characters and
// bounded. The intake takes every event through it.
func EventOf(p Provider, r *Request, opts map[string]string) Event {
	ev := p.Event(r, opts)
	if ev.ID == "" {
		ev.ID = BodyHashID(r.Body)
	}
	ev.ID = SafeEventID(ev.ID)
	// Type and action reach the host's RELAY_EVENT_TYPE and
	// RELAY_EVENT_ACTION and the audit trail.
	ev.Type = SafeText(ev.Type, shared.MaxEventName)
	ev.Action = SafeText(ev.Action, shared.MaxEventName)
	ev.Note = SafeText(ev.Note, maxNoteLen)
	return ev
}

// SafeEventID is id when it is a safe event id (see MaxEventIDLen), else
// "h-" and the first 32 hex of its SHA-256.
func SafeEventID(id string) string {
	if id != "" && len(id) <= MaxEventIDLen && strings.IndexFunc(id, unsafeIDRune) < 0 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:16])
}

func unsafeIDRune(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("._~-:@+=/", r)
}

// SafeText is s as valid UTF-8 without control characters (each dropped),
// cut to at most n bytes without splitting a character.
func SafeText(s string, n int) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if !clean {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return -1
			}
			return r
		}, strings.ToValidUTF8(s, "\uFFFD"))
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
