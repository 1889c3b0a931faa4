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

// What an insert writes, worked out once for every engine: the row of a
// new delivery (InsertRow), its id, its audit events, and what reading it
// back would give. The engines differ only in the SQL that writes it.

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

// Key is the dedupe key as one string: (host, source, event id), or a
// group's (group, source, event id, lane).
func (p *DeliveryInsertParams) Key() string {
	if p.GroupID != "" {
		return GroupDedupeKey(p.GroupID, p.Source, p.EventID, p.Lane)
	}
	return DedupeKey(p.HostID, p.Source, p.EventID)
}

// DedupeKey is the key DeliveryInsertParams.Key gives a host's event.
func DedupeKey(hostID, source, eventID string) string {
	return hostID + "\x00" + source + "\x00" + eventID
}

// GroupDedupeKey is the key DeliveryInsertParams.Key gives a group's event.
func GroupDedupeKey(groupID, source, eventID, lane string) string {
	return "\x01" + groupID + "\x00" + source + "\x00" + eventID + "\x00" + lane
}

// KeyOf is the dedupe key of a stored delivery.
func KeyOf(d *Delivery) string {
	if d.GroupID != "" {
		return GroupDedupeKey(d.GroupID, d.Source, d.EventID, d.Lane)
	}
	return DedupeKey(d.HostID, d.Source, d.EventID)
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

// LaneDeliveryID is the id of the delivery of a fanout's member (lane):
// {source}:{event_id}:{lane}:{received_ms}, distinct for each member of
// the same event received at the same time.
func LaneDeliveryID(source, eventID, lane string, at time.Time) string {
	return source + ":" + eventID + ":" + lane + ":" + strconv.FormatInt(at.UnixMilli(), 10)
}

// next moves r to the next millisecond and its id.
func (r *InsertRow) next() {
	r.ReceivedAt = r.ReceivedAt.Truncate(time.Millisecond).Add(time.Millisecond)
	if r.Lane != "" {
		r.ID = LaneDeliveryID(r.Source, r.EventID, r.Lane, r.ReceivedAt)
		return
	}
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
		LeaseExpiresAt: r.LeaseUntil(at), CorrelationID: r.CorrelationID, UpdatedAt: at, GroupID: r.GroupID, Lane: r.Lane,
	}
	if r.Leased() {
		d.RawBody = r.Body
	}
	return d
}
