package shared

import (
	"fmt"
	"slices"
	"strings"
)

// PathHostSources lists the calling host's sources as the cloud has them
// (GET, with the host's token, as PathHostDeliveries), so that the host can
// compare them with its own configuration (CompareSources).
const PathHostSources = "/api/hosts/sources"

// HostSourcesResponse answers GET PathHostSources: the host's own sources,
// ordered by name. It never carries a secret or a secret's fingerprint.
type HostSourcesResponse struct {
	Sources []HostSource `json:"sources"`
}

// HostSource is one of a host's sources as the cloud has it.
type HostSource struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	// Enabled: the cloud takes the source's webhooks. A disabled source's
	// URL is answered 404 and nothing is stored.
	Enabled bool `json:"enabled"`
	// Events is the operator's event filter: the cloud answers any other
	// event "filtered" and stores nothing. Empty: every event.
	Events []string `json:"events"`
	// Group, when set, is the group whose source it is (the host is a
	// member): its webhooks reach the host's handler of that name.
	Group string `json:"group,omitempty"`
	// Actions says whether the provider's events carry an action beside
	// their type (GitHub's "pull_request" "opened"): a filter entry of the
	// type alone takes it with every action. false: a type is matched whole
	// (Stripe's "invoice.paid", which "invoice" does not take). nil (a
	// cloud older than the field): unknown, taken as true.
	Actions *bool `json:"actions,omitempty"`
}

// SourceNameRule says in words what ValidSourceName takes.
const SourceNameRule = "1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit"

// ValidSourceName reports whether name can be a source's name: the last
// segment of its webhook URL (/api/webhooks/:hostId/:source), the key of
// its handler in a host's configuration (webhooks.NAME). The cloud
// answers any other name in a URL 404 without a look-up, and refuses to
// create a source by it; a host refuses a configuration that names one.
func ValidSourceName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Kinds of SourceMismatch.
const (
	// MismatchNotInCloud: the host handles (enabled) a source the cloud
	// does not have. No webhook ever reaches that handler; it is most
	// likely a typo of a cloud source's name (SourceMismatch.Nearest).
	MismatchNotInCloud = "not-in-cloud"
	// MismatchDisabledInCloud: the host handles (enabled) a source the
	// cloud has disabled. The cloud answers its provider 404 and stores
	// nothing until the source is enabled there.
	MismatchDisabledInCloud = "disabled-in-cloud"
	// MismatchNotOnHost: an enabled cloud source the host's configuration
	// does not name. Its webhooks are stored and handed to the host as any
	// other, which skips them: recorded as skipped in its ledger and in the
	// cloud, acked, kept in the cloud for its retention window and
	// replayable once the host handles the source.
	MismatchNotOnHost = "not-on-host"
	// MismatchDisabledOnHost: an enabled cloud source the host's
	// configuration disables. Its webhooks reach the host and are skipped,
	// as MismatchNotOnHost's are.
	MismatchDisabledOnHost = "disabled-on-host"
	// MismatchEventsNotSent: the host's source wants events (its events,
	// or its routes') that the cloud's source filters out (HostSource.Events):
	// the cloud answers them "filtered" and stores nothing, so those routes
	// never run (SourceMismatch.Events lists them).
	MismatchEventsNotSent = "events-not-sent"
	// MismatchFilterMatchesNothing: the cloud's source, which the host
	// handles, holds event filter entries that match no webhook, stored by
	// an older cloud that took them (a "*" within one: "pull_request.*").
	// The cloud answers the webhooks they were meant to let through
	// "filtered" and stores none (SourceMismatch.Events lists them).
	MismatchFilterMatchesNothing = "filter-matches-nothing"
)

// SourceMismatch is one way a host's sources and the cloud's differ.
type SourceMismatch struct {
	Kind string `json:"kind"` // a Mismatch* constant
	// Source is the name the mismatch is about: the host's for
	// MismatchNotInCloud, the cloud's (which is the host's too, where the
	// host names it) otherwise.
	Source string `json:"source"`
	// Nearest, for MismatchNotInCloud and MismatchNotOnHost, is the name on
	// the other side closest to Source when it is close enough to be a
	// typo of it (by edit distance, case aside): for a host source
	// "githb", the cloud's "github"; for the cloud's "github", the host's
	// "githb". Empty when no name is close.
	Nearest string `json:"nearest,omitempty"`
	// Events, for MismatchEventsNotSent, are the host's events the cloud
	// never sends; for MismatchFilterMatchesNothing, the cloud's entries
	// that match nothing.
	Events []string `json:"events,omitempty"`
	// Message says, for a person, what happens and what to do about it. It
	// names the host's configuration key ("webhooks.githb").
	Message string `json:"message"`
}

// CompareSources compares the sources a host handles (its Subscription, as
// the host's configuration makes it and the host reports it in its
// heartbeats) with the host's sources as the cloud has them, and returns
// every mismatch, ordered by source name and then kind; none when they
// agree. A nil sub is a host that reported no configuration: it handles no
// source.
//
// A host source that is disabled and unknown to the cloud (or disabled
// there too) is no mismatch: nothing is meant to happen. Neither is a
// cloud source that is disabled and that the host does not handle.
func CompareSources(sub *Subscription, cloud []HostSource) []SourceMismatch {
	var host map[string]SourceSubscription
	if sub != nil {
		host = sub.Webhooks
	}
	inCloud := make(map[string]HostSource, len(cloud))
	cloudNames := make([]string, 0, len(cloud))
	for _, c := range cloud {
		inCloud[c.Name] = c
		cloudNames = append(cloudNames, c.Name)
	}
	// Names a typo could stand for: on the host, those the cloud does not
	// have; in the cloud, the enabled ones the host does not name.
	var hostOnly, cloudOnly []string
	for name, h := range host {
		if _, ok := inCloud[name]; !ok && h.Enabled {
			hostOnly = append(hostOnly, name)
		}
	}
	for _, c := range cloud {
		if _, ok := host[c.Name]; !ok && c.Enabled {
			cloudOnly = append(cloudOnly, c.Name)
		}
	}
	slices.Sort(hostOnly)
	slices.Sort(cloudOnly)

	var out []SourceMismatch
	for name, h := range host {
		c, ok := inCloud[name]
		switch {
		case !h.Enabled:
		case !ok:
			m := SourceMismatch{Kind: MismatchNotInCloud, Source: name, Nearest: nearestName(name, cloudOnly)}
			if m.Nearest == "" {
				m.Nearest = nearestName(name, cloudNames)
			}
			m.Message = fmt.Sprintf("webhooks.%s: the cloud has no source %q for this host, so this handler never runs", name, name)
			if m.Nearest != "" {
				m.Message += fmt.Sprintf("; did you mean %q? Rename webhooks.%s to webhooks.%s in the host's configuration (then reload it: SIGHUP)",
					m.Nearest, name, m.Nearest)
			} else {
				m.Message += fmt.Sprintf(". Add the source in the cloud (console or PUT /api/hosts/:id/sources/%s) or remove it from the host's configuration", name)
			}
			out = append(out, m)
		case !c.Enabled:
			out = append(out, SourceMismatch{Kind: MismatchDisabledInCloud, Source: name,
				Message: fmt.Sprintf("webhooks.%s: the source %q is disabled in the cloud, which answers its webhooks 404 and stores none, "+
					"so this handler never runs. Enable it in the cloud, or disable it in the host's configuration", name, name)})
		default:
			if dead := DeadEntries(c.Events); len(dead) > 0 {
				out = append(out, SourceMismatch{Kind: MismatchFilterMatchesNothing, Source: name, Events: dead,
					Message: fmt.Sprintf("webhooks.%s: the cloud's source %q has event filter entries that match no webhook: %s "+
						"(an older cloud stored them): it answers the webhooks they were meant to let through \"filtered\" and stores none. "+
						"Replace each in the source's events in the cloud: the type alone (\"pull_request\") takes every action, or list the types",
						name, name, strings.Join(dead, ", "))})
			}
			if lost := eventsNotSent(h.Events, c.Events, c.Actions == nil || *c.Actions); len(lost) > 0 {
				out = append(out, SourceMismatch{Kind: MismatchEventsNotSent, Source: name, Events: lost,
					Message: fmt.Sprintf("webhooks.%s: the cloud's source %q takes only %s, so it answers %s \"filtered\" and stores none: "+
						"what this host would run for them never runs. Add them to the source's events in the cloud, or drop them from the host's configuration",
						name, name, strings.Join(c.Events, ", "), strings.Join(lost, ", "))})
			}
		}
	}
	for _, c := range cloud {
		h, named := host[c.Name]
		if !c.Enabled || (named && h.Enabled) {
			continue
		}
		skipped := "its webhooks are still stored and handed to this host, which skips them: " +
			"each is recorded as skipped (in the host's ledger and in the cloud), acked, kept in the cloud for its retention window, " +
			"and can be replayed once the host handles the source"
		if named {
			out = append(out, SourceMismatch{Kind: MismatchDisabledOnHost, Source: c.Name,
				Message: fmt.Sprintf("webhooks.%s is disabled in the host's configuration, while the cloud's source %q is enabled: %s. "+
					"Enable it in the host's configuration, or disable the source in the cloud if this host is not to take it", c.Name, c.Name, skipped)})
			continue
		}
		m := SourceMismatch{Kind: MismatchNotOnHost, Source: c.Name, Nearest: nearestName(c.Name, hostOnly)}
		m.Message = fmt.Sprintf("the cloud's source %q is enabled, and the host's configuration has no webhooks.%s: %s. ", c.Name, c.Name, skipped)
		if m.Nearest != "" {
			m.Message += fmt.Sprintf("webhooks.%s looks like a typo of it: rename it to webhooks.%s", m.Nearest, c.Name)
		} else {
			m.Message += fmt.Sprintf("Add webhooks.%s to the host's configuration, or disable the source in the cloud if this host is not to take it", c.Name)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b SourceMismatch) int {
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out
}

// eventsNotSent are the events of wanted that the cloud's filter never
// passes: neither the event nor "*" is in it and, where the provider's
// events carry actions, neither is its type, nor an entry that is an
// action of it ("pull_request.opened" passes some of a host's
// "pull_request"). Without actions an event is a type, matched whole:
// "invoice" does not pass Stripe's "invoice.paid". Empty wanted (every
// event) or filter (the cloud sends all): none.
func eventsNotSent(wanted, filter []string, actions bool) []string {
	if len(filter) == 0 || slices.Contains(filter, "*") {
		return nil
	}
	// An entry that matches nothing passes nothing ("pull_request.*" would
	// otherwise pass a host's "pull_request" as "pull_request.opened" does).
	filter = slices.DeleteFunc(slices.Clone(filter), deadEntry)
	var lost []string
	for _, e := range wanted {
		if e == "*" || slices.Contains(filter, e) {
			continue
		}
		typ, _, _ := strings.Cut(e, ".")
		if actions && (slices.Contains(filter, typ) ||
			slices.ContainsFunc(filter, func(f string) bool { return strings.HasPrefix(f, e+".") })) {
			continue
		}
		lost = append(lost, e)
	}
	return lost
}

// DeadEntries are the entries of a source's event filter that match no
// webhook: those CheckEventFilter refuses, which the cloud now refuses to
// store and an older one stored.
func DeadEntries(filter []string) []string {
	var dead []string
	for _, f := range filter {
		if deadEntry(f) {
			dead = append(dead, f)
		}
	}
	return dead
}

// deadEntry says whether an entry of an event filter matches no webhook.
func deadEntry(f string) bool { return CheckEventFilter(f) != nil }

// nearestName is the name among candidates closest to name by edit
// distance (case aside; the first in order on a tie), when it is close
// enough to be a typo: at most 2 edits, and at most a third of the longer
// name's letters. "" when none is.
func nearestName(name string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := editDistance(strings.ToLower(name), strings.ToLower(c))
		if d > 2 || 3*d > max(len([]rune(name)), len([]rune(c))) {
			continue
		}
		if bestD < 0 || d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the number of single-character insertions, deletions,
// substitutions and swaps of two adjacent characters that turn a into b
// (optimal string alignment distance): "githb" → "github" is 1, and so is
// "gihtub" → "github".
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// rows i-2, i-1 and i of the table of distances between prefixes.
	prev2 := make([]int, len(t)+1)
	prev := make([]int, len(t)+1)
	cur := make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}
