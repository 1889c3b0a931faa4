package store

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// InspectStore is what operators read across hosts: deliveries found by
// status, provider, event id or correlation id; the audit trail of every
// delivery as it grows; and the results hosts reported from their ledgers.
type InspectStore interface {
	// DeliveryFind returns deliveries of every host (or of HostID when set)
	// matching the params' filters, newest received first, without bodies,
	// after the keyset cursor if one is given.
	DeliveryFind(ctx context.Context, p *DeliveryFindParams) ([]*Delivery, error)
	// DeliveryEventListAfter returns audit events of every delivery with an
	// id above AfterID, oldest first, at most Limit (0: 100), each with its
	// delivery's host and source.
	DeliveryEventListAfter(ctx context.Context, p *DeliveryEventListAfterParams) ([]*DeliveryEventOf, error)
	// DeliveryResultGet returns the result a host last reported for one of
	// its deliveries, or ErrNotFound when it reported none.
	DeliveryResultGet(ctx context.Context, deliveryID string) (*DeliveryResult, error)
}

// DeliveryFindParams filters DeliveryFind; zero values mean "any".
type DeliveryFindParams struct {
	HostID        string
	GroupID       string // a group's deliveries (by whichever member holds them)
	Status        Status
	Source        string
	Provider      string // the provider of the delivery's source
	EventID       string
	CorrelationID string
	ReceivedSince *time.Time // received at or after
	Limit         int        // 0: 100
	// Keyset cursor: deliveries strictly older than (BeforeReceivedAt, BeforeID).
	BeforeReceivedAt *time.Time
	BeforeID         string
}

// FindQuery is DeliveryFind's query with only the filters given, so that
// the planner sees which index serves it, whatever plan it caches: the
// delivery keys for an event id, the correlation id's index, a host's
// receipt order, or everyone's. A correlation id
// names one webhook (a group's fanout: one per member), so with one the
// host and the group are checked on the rows it finds, written so that no
// index of theirs applies: a host's receipt order, read newest first,
// would walk all its deliveries for an id that is not there.
//
// The query has a ? for each of its arguments, in order. An engine gives
// its select list, its keyset condition on (received_at, delivery_id)
// with two ?, how it writes a time as a column value, and the condition
// (no ?; "" for none) it puts in place of the host's when a status is
// looked for on every host, with neither an event id nor a source (each
// has an index of its own): one that holds for every delivery, but lets
// the engine read each host's deliveries in that status in order instead
// of everyone's deliveries.
func FindQuery(p *DeliveryFindParams, columns, before string, at func(time.Time) any, everyHost string) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v ...any) { where, args = append(where, cond), append(args, v...) }
	byCorrelation := p.CorrelationID != ""
	switch {
	case p.HostID != "" && byCorrelation:
		add("host_id || '' = ?", p.HostID)
	case p.HostID != "":
		add("host_id = ?", p.HostID)
	case p.Status != "" && p.Status != StatusDLQ && p.EventID == "" && p.Source == "" && !byCorrelation && everyHost != "":
		// (The dead letters have an index of their own, in receipt order.)
		add(everyHost)
	}
	switch {
	case p.GroupID != "" && byCorrelation:
		add("group_id || '' = ?", p.GroupID)
	case p.GroupID != "":
		add("group_id <> '' AND group_id = ?", p.GroupID) // the partial index's own condition, said
	}
	if p.Status != "" {
		add("status = ?", string(p.Status))
	}
	if p.Source != "" {
		add("source = ?", p.Source)
	}
	if p.Provider != "" {
		add(`EXISTS (SELECT 1 FROM sources s
			WHERE s.host_id = deliveries.host_id AND s.name = deliveries.source AND s.provider = ?)`, p.Provider)
	}
	if p.EventID != "" {
		// The hosts' delivery key and the groups' lead with the event id:
		// a range of each, whatever the sources.
		add("((group_id = '' AND event_id = ?) OR (group_id <> '' AND event_id = ?))", p.EventID, p.EventID)
	}
	if p.CorrelationID != "" {
		add("correlation_id = ?", p.CorrelationID)
	}
	if p.ReceivedSince != nil {
		add("received_at >= ?", at(*p.ReceivedSince))
	}
	if p.BeforeReceivedAt != nil {
		add(before, at(*p.BeforeReceivedAt), p.BeforeID)
	}
	q := `SELECT ` + columns + ` FROM deliveries`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY received_at DESC, delivery_id DESC LIMIT ?`
	return q, append(args, LimitOr(p.Limit, 100))
}

type DeliveryEventListAfterParams struct {
	AfterID int64
	Limit   int // 0: 100
	// Newest, when set, returns the newest Limit events (still oldest
	// first) instead of those after AfterID: where a tail starts.
	Newest bool
}

// EventsQuery is DeliveryEventListAfter's query, by id range: after an
// id, or the newest. It has a ? for each of its arguments, in order. An
// engine gives the condition that finds an event's (e) delivery (d).
// Events carry their host and source; those written before they did take
// them from their delivery, each found by its key, as every event did
// before. An event is deleted with its delivery, so every one has it; an
// engine skips a row whose host is NULL all the same. (A filter for that
// in the query, EXISTS beside the event's own host, was planned by
// Postgres as a hash of every delivery.)
func EventsQuery(p *DeliveryEventListAfterParams, sameDelivery string) (string, []any) {
	const columns = `SELECT id, delivery_id, at, from_status, to_status, reason, attempt, host_id, source FROM delivery_events`
	events := columns + ` WHERE id > ? ORDER BY id LIMIT ?`
	args := []any{p.AfterID, LimitOr(p.Limit, 100)}
	if p.Newest {
		events, args = columns+` ORDER BY id DESC LIMIT ?`, args[1:]
	}
	of := func(col string) string {
		return `COALESCE(e.` + col + `, (SELECT d.` + col + ` FROM deliveries d WHERE ` + sameDelivery + `))`
	}
	return `SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, ` + of("host_id") + `, ` + of("source") + `
		FROM (` + events + `) e
		ORDER BY e.id`, args
}

// OwnedEvent finishes an events row of EventsQuery read into e with its
// host and source, and is nil for a row without them (no delivery), which
// the read drops (DropNil).
func OwnedEvent(e *DeliveryEventOf, host, source *string) *DeliveryEventOf {
	if host == nil || source == nil {
		return nil
	}
	e.HostID, e.Source = *host, *source
	return e
}

// DropNil is list without its nil entries.
func DropNil[T any](list []*T) []*T {
	return slices.DeleteFunc(list, func(v *T) bool { return v == nil })
}

// DeliveryEventOf is an audit event with its delivery's host and source.
type DeliveryEventOf struct {
	DeliveryEvent
	// HostID is the host that held the delivery once the event was
	// recorded: a group's delivery handed on shows each member on its own
	// events (a hand-over at the member it went to). Events written before
	// events carried it show the delivery's host now.
	HostID string
	Source string
}

// DeliveryResult is what a host's ledger recorded of a delivery's handler
// run, as the host reported it with the ack or nack of that run.
type DeliveryResult struct {
	DeliveryID     string
	Attempt        int    // the cloud's attempt the run was (0: unknown)
	Result         string // success, error or skipped
	Handler        string
	ResponseStatus *int // the forward target's HTTP status
	ExitCode       *int // the exec program's exit code
	DurationMS     int64
	Error          string
	ReportedAt     time.Time
}

// Bounds of a reported result: a host sends them, and they are kept.
const (
	maxResultHandler = 200
	maxResultError   = 2000
)

// Bounded returns r with its strings cut to the bounds kept, on a rune
// boundary.
func (r DeliveryResult) Bounded() DeliveryResult {
	r.Handler = cutRunes(r.Handler, maxResultHandler)
	r.Error = cutRunes(r.Error, maxResultError)
	return r
}

func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// ResultValid says whether a reported result is one a ledger records.
func ResultValid(r string) bool { return r == "success" || r == "error" || r == "skipped" }

// LastResults returns results with one per delivery (the last given), each
// Bounded, in the order of their first appearance: what an engine stores.
func LastResults(results []DeliveryResult) []DeliveryResult {
	at := make(map[string]int, len(results))
	out := make([]DeliveryResult, 0, len(results))
	for _, r := range results {
		r = r.Bounded()
		if i, ok := at[r.DeliveryID]; ok {
			out[i] = r
			continue
		}
		at[r.DeliveryID] = len(out)
		out = append(out, r)
	}
	return out
}
