// Package handler runs a leased webhook on the host: forward POSTs the raw
// body to a local URL, exec runs a program with the payload on stdin. Each
// reports an Outcome that the agent records in the ledger and turns into an
// ack or a nack.
package handler

import (
	"strings"
	"unicode/utf8"

	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
)

// Job is one webhook to handle, with what the host read from its payload.
type Job struct {
	Webhook shared.Webhook
	Summary summary.Summary
}

// Outcome is the result of one handler run.
type Outcome struct {
	OK        bool   // success: ack
	Retryable bool   // on failure: may the cloud retry?
	Error     string // on failure: what went wrong, in one short line
	// ResponseStatus is the forward target's HTTP status (0: no answer).
	ResponseStatus int
	// ExitCode is the exec program's exit code (nil: it did not exit on its
	// own: not started, killed on timeout or by a signal).
	ExitCode *int
	// Output is the start of the forward target's answer, or the end of the
	// program's output (stdout and stderr as written), at most MaxOutput bytes.
	Output string
}

func failure(retryable bool, msg string) Outcome {
	return Outcome{Retryable: retryable, Error: msg}
}

// Bounds on what is kept of a handler's answer.
const (
	maxSnippet = 256  // in an error message
	MaxOutput  = 2048 // in Outcome.Output
)

// snippet returns b trimmed of space and cut to at most maxSnippet bytes
// without splitting a UTF-8 sequence.
func snippet(b []byte) string { return head(b, maxSnippet) }

// head keeps the first n bytes of b (trimmed), marking a cut with "…".
func head(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + "…"
}

// tail keeps the last n bytes of b (trimmed), marking a cut with "…".
func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…" + strings.ToValidUTF8(s[cut:], "\uFFFD")
}

// lastLine is the last non-empty line of s, for an error message.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return snippet([]byte(s))
}
