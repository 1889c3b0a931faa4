package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rules every engine applies the same way. Engines differ only in SQL.

// DefaultMaxAttempts is how many attempts a delivery without a schedule of
// its own gets: one per delay of the delivery core's default policy
// (delivery.DefaultRetryPolicy).
const DefaultMaxAttempts = 5

// MaxAttemptsFor resolves a configured number of attempts: n when positive,
// else one per entry of delays, else DefaultMaxAttempts.
func MaxAttemptsFor(n int, delays []time.Duration) int {
	switch {
	case n > 0:
		return n
	case len(delays) > 0:
		return len(delays)
	}
	return DefaultMaxAttempts
}

// EncodeDelays is a retry schedule as stored: a JSON array of milliseconds,
// or nil (NULL, the default policy) for an empty schedule.
func EncodeDelays(delays []time.Duration) *string {
	if len(delays) == 0 {
		return nil
	}
	ms := make([]int64, len(delays))
	for i, d := range delays {
		ms[i] = d.Milliseconds()
	}
	b, _ := json.Marshal(ms) // a slice of integers always encodes
	s := string(b)
	return &s
}

// DecodeDelays reads a stored retry schedule; NULL (nil) is nil.
func DecodeDelays(stored *string) ([]time.Duration, error) {
	if stored == nil {
		return nil, nil
	}
	var ms []int64
	if err := json.Unmarshal([]byte(*stored), &ms); err != nil {
		return nil, fmt.Errorf("retry delays: %w", err)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out, nil
}

// ReceiveReason is the reason of a new delivery's first audit event: the
// receive transition's, with ReceiveNote in parentheses when there is one
// (a note already in parentheses is kept as it is).
func (p *DeliveryInsertParams) ReceiveReason() string {
	note := strings.TrimSpace(p.ReceiveNote)
	switch {
	case note == "":
		return TransitionReceive.Reason
	case strings.HasPrefix(note, "("):
		return TransitionReceive.Reason + " " + note
	}
	return TransitionReceive.Reason + " (" + note + ")"
}

// LeaseCut returns how many lease candidates (body sizes, in FIFO order) fit
// in one batch of at most max deliveries and maxBytes of body (0: no byte
// bound). A single delivery larger than maxBytes goes alone.
func LeaseCut(sizes []int, max, maxBytes int) int {
	n, total := 0, 0
	for _, size := range sizes {
		if n >= max || (n > 0 && maxBytes > 0 && total+size > maxBytes) {
			break
		}
		total += size
		n++
	}
	return n
}

// JSONFields encodes a source's list and map fields as stored, nil as empty.
func (p *SourceUpsertParams) JSONFields() (events, secrets, options []byte, err error) {
	ev, sec, opt := p.Events, p.Secrets, p.Options
	if ev == nil {
		ev = []string{}
	}
	if sec == nil {
		sec = []SealedSecret{}
	}
	if opt == nil {
		opt = map[string]string{}
	}
	if events, err = json.Marshal(ev); err != nil {
		return nil, nil, nil, err
	}
	if secrets, err = json.Marshal(sec); err != nil {
		return nil, nil, nil, err
	}
	if options, err = json.Marshal(opt); err != nil {
		return nil, nil, nil, err
	}
	return events, secrets, options, nil
}

// AllowedIPsJSON encodes a source's allowlist as stored, nil as empty.
func (p *SourceUpsertParams) AllowedIPsJSON() string {
	if len(p.AllowedIPs) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(p.AllowedIPs) // strings always encode
	return string(b)
}

// InsertRow is a DeliveryInsertParams made ready to write: what both
// engines store the same way.
type InsertRow struct {
	*DeliveryInsertParams
	// ID and ReceivedAt are the params' own, unless another event had that
	// delivery id: then the next free millisecond's (see MoveOn).
	ID          string
	ReceivedAt  time.Time
	HeadersJSON string
	Body        []byte // never nil
	MaxAttempts int
	Delays      *string // EncodeDelays(RetryDelays)
}

// Key is the dedupe key, (host, source, event id), as one string.
func (p *DeliveryInsertParams) Key() string { return DedupeKey(p.HostID, p.Source, p.EventID) }

// DedupeKey is the key DeliveryInsertParams.Key gives an event.
func DedupeKey(hostID, source, eventID string) string {
	return hostID + "\x00" + source + "\x00" + eventID
}

// PrepareInserts makes each insert ready to write. order lists their
// indexes sorted by dedupe key (stable, so repeats keep their arrival
// order): taking row locks in one order keeps concurrent batches from
// deadlocking on each other.
func PrepareInserts(ps []*DeliveryInsertParams) (rows []InsertRow, order []int, err error) {
	rows = make([]InsertRow, len(ps))
	order = make([]int, len(ps))
	for i, p := range ps {
		headers := p.Headers
		if headers == nil {
			headers = map[string]string{}
		}
		h, err := json.Marshal(headers)
		if err != nil {
			return nil, nil, fmt.Errorf("delivery insert: headers: %w", err)
		}
		body := p.RawBody
		if body == nil {
			body = []byte{}
		}
		rows[i] = InsertRow{DeliveryInsertParams: p, ID: p.ID, ReceivedAt: p.ReceivedAt, HeadersJSON: string(h),
			Body: body, MaxAttempts: MaxAttemptsFor(p.MaxAttempts, p.RetryDelays), Delays: EncodeDelays(p.RetryDelays)}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ps[a].Key(), ps[b].Key()) })
	return rows, order, nil
}

// MaxInsertRounds bounds the tries of an event whose delivery id is taken
// (see MoveOn).
const MaxInsertRounds = 8

// DeliveryID is the id of event eventID of source, received at at:
// {source}:{event_id}:{received_ms}.
func DeliveryID(source, eventID string, at time.Time) string {
	return source + ":" + eventID + ":" + strconv.FormatInt(at.UnixMilli(), 10)
}

// next moves r to the next millisecond and its id.
func (r *InsertRow) next() {
	r.ReceivedAt = r.ReceivedAt.Truncate(time.Millisecond).Add(time.Millisecond)
	r.ID = DeliveryID(r.Source, r.EventID, r.ReceivedAt)
}

// MoveOn moves rows[i], for each i of idx, whose delivery id another
// event already has — two hosts sent the same event (a fan-out, a provider
// with one id for every endpoint) under the same source name in the same
// millisecond — to the next millisecond whose id no other event of rows
// uses. The store then tries that one.
func MoveOn(rows []InsertRow, idx []int) {
	used := make(map[string]string, len(rows))
	for i := range rows {
		used[rows[i].ID] = rows[i].Key()
	}
	for _, i := range idx {
		r := &rows[i]
		r.next()
		for k, ok := used[r.ID]; ok && k != r.Key(); k, ok = used[r.ID] {
			r.next()
		}
		used[r.ID] = r.Key()
	}
}

// Leased says whether r is stored leased (its params' Lease).
func (r *InsertRow) Leased() bool { return r.Lease != nil }

// Status is the status r is stored with when it is new: delivering when
// leased, else queued.
func (r *InsertRow) Status() Status {
	if r.Leased() {
		return TransitionLease.To
	}
	return TransitionReceive.To
}

// Attempts is the attempt count r is stored with when it is new: the
// lease's first attempt, else none.
func (r *InsertRow) Attempts() int {
	if r.Leased() {
		return 1
	}
	return 0
}

// LeaseReason is the reason of r's lease event, naming its transport; ""
// when it is not leased.
func (r *InsertRow) LeaseReason() string {
	if !r.Leased() {
		return ""
	}
	return LeaseOn(r.Lease.Via).Reason
}

// LeaseUntil is when the lease of r, stored new at at, ends; nil when it
// is not leased.
func (r *InsertRow) LeaseUntil(at time.Time) *time.Time {
	if !r.Leased() {
		return nil
	}
	t := at.Add(r.Lease.For).Truncate(time.Millisecond)
	return &t
}

// Events are the audit events of r stored new at at, in order: its
// receipt, then its lease when leased (what DeliveryLease records).
func (r *InsertRow) Events(at time.Time) []DeliveryEvent {
	evs := []DeliveryEvent{{DeliveryID: r.ID, At: at, To: TransitionReceive.To, Reason: r.ReceiveReason()}}
	if r.Leased() {
		evs = append(evs, DeliveryEvent{DeliveryID: r.ID, At: at, From: TransitionReceive.To, To: TransitionLease.To,
			Reason: r.LeaseReason(), Attempt: 1})
	}
	return evs
}

// Inserted is the delivery r becomes when it is stored new at at (the
// engine's millisecond time): what reading the row back would give,
// without reading it back. A leased one carries its body, to be pushed.
func (r *InsertRow) Inserted(at time.Time) *Delivery {
	headers := make(map[string]string, len(r.Headers))
	maps.Copy(headers, r.Headers)
	var delays []time.Duration
	if len(r.RetryDelays) > 0 {
		delays = make([]time.Duration, len(r.RetryDelays))
		for i, d := range r.RetryDelays {
			delays[i] = d.Truncate(time.Millisecond) // stored in milliseconds
		}
	}
	d := &Delivery{
		ID: r.ID, HostID: r.HostID, Source: r.Source, EventID: r.EventID, EventType: r.EventType,
		EventAction: r.EventAction, Headers: headers, BodySize: len(r.Body), Status: r.Status(),
		Attempts: r.Attempts(), MaxAttempts: r.MaxAttempts, RetryDelays: delays, ReceivedAt: at,
		LeaseExpiresAt: r.LeaseUntil(at), CorrelationID: r.CorrelationID, UpdatedAt: at,
	}
	if r.Leased() {
		d.RawBody = r.Body
	}
	return d
}
