// Package handler runs a leased webhook on the host: forward POSTs the raw
// body to a local URL, exec runs a program with the payload on stdin. Each
// reports an Outcome that the agent records in the ledger and turns into an
// ack or a nack.
package handler

import (
	"strings"
	"unicode/utf8"
)

// Outcome is the result of one handler run.
type Outcome struct {
	OK        bool   // success: ack
	Retryable bool   // on failure: may the cloud retry?
	Error     string // on failure: what went wrong (short)
	Summary   string // what happened, for the ledger ("HTTP 200", "exit 0")
}

func failure(retryable bool, msg string) Outcome {
	return Outcome{Retryable: retryable, Error: msg, Summary: msg}
}

// maxSnippet bounds how much of a response body or program output is kept.
const maxSnippet = 256

// snippet returns s trimmed of space and cut to at most maxSnippet bytes
// without splitting a UTF-8 sequence.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) <= maxSnippet {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := maxSnippet
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + "…"
}
