package handler

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// What a webhook puts in a request's headers or a program's environment is
// partly the provider's choice (ids, types, header values, payload fields).
// Go's HTTP client refuses a request with a control character in a header,
// and exec refuses a NUL in the environment or more than the kernel's
// argument space: one such value would fail every attempt of a webhook that
// is otherwise fine. So values are made safe here, the provider's header
// values excepted, which are forwarded byte for byte when they are valid and
// dropped (with a note in the ledger's output) when they are not.

// Bounds of the environment a job adds: a variable's value, and all of them
// together. Linux refuses a single string over 128 KiB and an argv and
// environment over about 2 MiB (a quarter of the stack limit); the host's
// own environment keeps the rest.
const (
	maxEnvValue = 4 << 10
	maxJobEnv   = 64 << 10
)

// validHeaderName reports whether k is an HTTP token (RFC 9110 5.1), as Go's
// client requires of a header name.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v is a header value Go's client sends:
// no control character but the tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// safeID is an id for a header and the environment alike (the delivery id
// is both X-Relay-Delivery-Id and IDEMPOTENCY_KEY, which must agree): each
// control byte and '%' written as %XX, so a valid id is unchanged and two
// different ids stay different. The cloud sends only safe ids; this holds
// whatever it sends.
func safeID(s string) string {
	if validHeaderValue(s) && !strings.Contains(s, "%") && len(s) <= maxEnvValue {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxEnvValue-3; i++ {
		if c := s[i]; c < ' ' || c == 0x7f || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// envValue is v without NUL bytes, cut to maxEnvValue bytes on a character
// boundary.
func envValue(v string) string {
	v = strings.ReplaceAll(v, "\x00", "")
	if len(v) <= maxEnvValue {
		return v
	}
	cut := maxEnvValue
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut]
}

// withNote puts the host's note about a run before its output, within
// MaxOutput.
func withNote(note, output string) string {
	note = head([]byte(note), maxSnippet)
	if output == "" {
		return note
	}
	return note + "\n" + head([]byte(output), MaxOutput-len(note)-1)
}
