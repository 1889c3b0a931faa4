package verify

import (
	"crypto/ed25519"
	"fmt"
	"time"
)

// discord verifies Discord interactions (and Discord webhook events, which
// are signed alike): X-Signature-Ed25519 is the hex Ed25519 signature of
// X-Signature-Timestamp followed by the raw body, checked with the
// application's public key, which is what a discord source stores as its
// secret (64 hex characters). The timestamp must be within 5 minutes either
// way. Discord probes the URL with bad signatures and wants them refused.
//
// Event: id the interaction's id; type the interaction type by name
// (application_command, message_component, modal_submit…), action the
// command's name or the component's custom_id. Webhook events (a body with an
// "event") are typed by event.type (APPLICATION_AUTHORIZED…).
type discord struct{ profile }

const discordTolerance = 5 * time.Minute

func (discord) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	sig, stamp := r.Header.Get("X-Signature-Ed25519"), r.Header.Get("X-Signature-Timestamp")
	if sig == "" {
		return ErrMissingSignature
	}
	if stamp == "" {
		return fmt.Errorf("X-Signature-Timestamp absent: %w", ErrMissingSignature)
	}
	want, ok := decodeHex(sig, ed25519.SignatureSize)
	if !ok {
		return fmt.Errorf("X-Signature-Ed25519 is not %d bytes of hex: %w", ed25519.SignatureSize, ErrMalformed)
	}
	ts, ok := parseUnix(stamp)
	if !ok {
		return fmt.Errorf("X-Signature-Timestamp is not Unix seconds: %w", ErrMalformed)
	}
	msg := make([]byte, 0, len(stamp)+len(r.Body))
	msg = append(append(msg, stamp...), r.Body...)
	err := anySecret(secrets, func(s []byte) bool {
		key, ok := decodeHex(string(s), ed25519.PublicKeySize)
		return ok && ed25519.Verify(key, msg, want)
	})
	if err != nil {
		return err
	}
	return checkWindow(r.now(), ts, discordTolerance)
}

// Interaction types, as Discord numbers them in the body's "type". Webhook
// events number their own: 0 is their PING.
const (
	discordPing         = "1"
	discordCommand      = "2"
	discordComponent    = "3"
	discordAutocomplete = "4"
	discordModalSubmit  = "5"
	discordEventsPing   = "0"
)

// Interaction responses: PONG; a deferred message (the user sees
// "thinking…" until the app follows up); a deferred update of the
// component's message; no autocomplete choices (autocomplete cannot wait).
const (
	discordPong            = `{"type":1}`
	discordDeferredMessage = `{"type":5}`
	discordDeferredUpdate  = `{"type":6}`
	discordNoChoices       = `{"type":8,"data":{"choices":[]}}`
)

var discordTypeNames = map[string]string{
	discordPing:         "ping",
	discordCommand:      "application_command",
	discordComponent:    "message_component",
	discordAutocomplete: "application_command_autocomplete",
	discordModalSubmit:  "modal_submit",
}

func (discord) Event(r *Request, _ map[string]string) Event {
	f := jsonObject(r.Body)
	if f.has("event") || f.str("type") == discordEventsPing {
		typ := f.str("event", "type")
		if typ == "" {
			typ = "ping"
		}
		return Event{ID: BodyHashID(r.Body), Type: typ}
	}
	typ := f.str("type")
	if name, ok := discordTypeNames[typ]; ok {
		typ = name
	}
	return Event{
		ID:     idOrHash(f.str("id"), r.Body),
		Type:   typ,
		Action: firstOf(f.str("data", "name"), f.str("data", "custom_id")),
	}
}

// Handshake answers an interactions PING with a PONG, and a webhook events
// PING with 204.
func (discord) Handshake(r *Request) (*Reply, bool) {
	f := jsonObject(r.Body)
	switch {
	case f.has("event"):
		return nil, false
	case f.str("type") == discordPing:
		return &Reply{Status: 200, ContentType: "application/json", Body: []byte(discordPong)}, true
	case f.str("type") == discordEventsPing:
		return &Reply{Status: 204}, true
	}
	return nil, false
}

// Ack answers a stored interaction with a deferred response, which the app
// completes through the interaction token once its host has run it (the
// user sees "thinking…" meanwhile); webhook events get the 204 they expect.
func (discord) Ack(r *Request) (*Reply, bool) {
	f := jsonObject(r.Body)
	if f.has("event") {
		return &Reply{Status: 204}, true
	}
	body := discordDeferredMessage
	switch f.str("type") {
	case discordComponent:
		body = discordDeferredUpdate
	case discordAutocomplete:
		body = discordNoChoices
	}
	return &Reply{Status: 200, ContentType: "application/json", Body: []byte(body)}, true
}

// CheckSecret wants the application's public key: 64 hex characters.
func (discord) CheckSecret(secret []byte) error {
	if _, ok := decodeHex(string(secret), ed25519.PublicKeySize); !ok {
		return fmt.Errorf("a discord secret is the application's public key: %d hex characters (got %d characters)",
			2*ed25519.PublicKeySize, len(secret))
	}
	return nil
}

// SentHeaders: the Ed25519 signature and its timestamp.
func (discord) SentHeaders(map[string]string) []string {
	return []string{"X-Signature-Ed25519", "X-Signature-Timestamp"}
}

func (discord) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("discord", opts)
}
