package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// generic serves internal systems. By default it expects HMAC-SHA256 of the
// raw body, lower hex, in X-Signature (an optional "sha256=" prefix is
// accepted). Options:
//
//	signature_header  header carrying the signature (default X-Signature)
//	encoding          "hex" (default) or "base64"
//	mode              "hmac" (default) or "token": the header carries the
//	                  shared secret itself (default header X-Webhook-Secret)
//	event_id_header   header with the event id (default X-Event-Id, then
//	                  Idempotency-Key; else a hash of the body)
//	event_type_header header with the event type (default X-Event-Type, else
//	                  the body's "type" or "event" field)
type generic struct{ profile }

func (generic) Verify(r *Request, secrets [][]byte, opts map[string]string) error {
	if opts["mode"] == "token" {
		got := r.Header.Get(opt(opts, "signature_header", "X-Webhook-Secret"))
		if got == "" {
			return ErrMissingSignature
		}
		return matchToken(secrets, got)
	}
	sig := r.Header.Get(opt(opts, "signature_header", "X-Signature"))
	if sig == "" {
		return ErrMissingSignature
	}
	sig = strings.TrimPrefix(sig, "sha256=")
	var want []byte
	var err error
	if opts["encoding"] == "base64" {
		want, err = base64.StdEncoding.DecodeString(sig)
	} else {
		want, err = hex.DecodeString(sig)
	}
	if err != nil || len(want) != 32 {
		return fmt.Errorf("signature is not 32 bytes of %s: %w", opt(opts, "encoding", "hex"), ErrMalformed)
	}
	return matchBodyMAC(secrets, sha256.New, r.Body, want)
}

func (generic) Event(r *Request, opts map[string]string) Event {
	var id string
	if h := opts["event_id_header"]; h != "" {
		id = r.Header.Get(h)
	} else {
		id = firstOf(r.Header.Get("X-Event-Id"), r.Header.Get("Idempotency-Key"))
	}
	e := Event{ID: idOrHash(id, r.Body), Type: r.Header.Get(opt(opts, "event_type_header", "X-Event-Type"))}
	if e.Type == "" {
		f := bodyFields(r)
		e.Type = firstOf(f.str("type"), f.str("event"))
	}
	return e
}

// SecretHeaders: in token mode the header carries the shared secret itself.
func (generic) SecretHeaders(opts map[string]string) []string {
	if opts["mode"] != "token" {
		return nil
	}
	return []string{opt(opts, "signature_header", "X-Webhook-Secret")}
}

// SentHeaders: the headers the options read. They count only when the
// source's forward_headers names a list; else a generic source keeps every
// header (ForwardedHeaders).
func (generic) SentHeaders(opts map[string]string) []string {
	sent := []string{opt(opts, "event_type_header", "X-Event-Type")}
	if opts["mode"] != "token" {
		sent = append(sent, opt(opts, "signature_header", "X-Signature"))
	}
	if h := opts["event_id_header"]; h != "" {
		return append(sent, h)
	}
	return append(sent, "X-Event-Id", "Idempotency-Key")
}

func (generic) CheckOptions(opts map[string]string) error {
	return optionSpec{
		"signature_header":  headerName,
		"encoding":          oneOf("hex", "base64"),
		"mode":              oneOf("hmac", "token"),
		"event_id_header":   headerName,
		"event_type_header": headerName,
	}.check("generic", opts)
}

func opt(opts map[string]string, key, def string) string {
	if v := opts[key]; v != "" {
		return v
	}
	return def
}
