package shared

import (
	"errors"
	"fmt"
	"strings"
)

// MaxEventName bounds an event's type, and its action: the cloud cuts
// what a provider sends to it.
const MaxEventName = 128

// MaxEventFilter bounds an entry of a source's list of wanted events: a
// type and an action, each as long as they come, and the dot between.
const MaxEventFilter = 2*MaxEventName + 1

// EventFilterRule says in words what CheckEventFilter takes.
const EventFilterRule = `"*" alone, or an event type, optionally with its action after a dot ("push", "pull_request.opened"): ` +
	`letters, digits, "_", "-", ":" and "/" in parts separated by single dots, at most 257 characters`

// CheckEventFilter says why e cannot be an entry of a source's list of
// wanted events, or nil: the one rule for those lists, on the cloud (its
// source's filter) and on the host (its sources' and routes' events), as
// EventWanted is the one rule for what they let through. An entry is
// matched whole, so a "*" within one would match nothing: it is refused,
// not kept as a filter that lets no webhook through.
func CheckEventFilter(e string) error {
	switch {
	case e == "*":
		return nil
	case strings.TrimSpace(e) == "":
		return errors.New("empty event name")
	case strings.Contains(e, "*"):
		return fmt.Errorf(`invalid event name %q: the only wildcard is "*" on its own (a type alone, like "pull_request", already matches every action)`, e)
	case len(e) > MaxEventFilter || !eventFilterShape(e):
		return fmt.Errorf(`invalid event name %q: letters, digits, "_", "-", ":" or "/", in parts separated by single dots, at most %d characters`, e, MaxEventFilter)
	}
	return nil
}

// eventFilterShape: parts of letters, digits, '_', '-', ':' and '/',
// separated by single dots. (Written out: a regular expression with a
// bounded length compiles into a program of that many copies, built when
// the binary starts.)
func eventFilterShape(e string) bool {
	dot := true // at the start, as after a dot: a part must begin
	for i := 0; i < len(e); i++ {
		switch c := e[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == ':', c == '/':
			dot = false
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return !dot
}
