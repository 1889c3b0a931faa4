package ledger

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// ErrInvalidCursor is returned by DeliveryList for a cursor it did not make.
var ErrInvalidCursor = errors.New("invalid cursor")

// Result is the outcome recorded for a delivery.
type Result string

// Results a ledger row can hold.
const (
	ResultSuccess Result = "success"
	ResultError   Result = "error"
	ResultSkipped Result = "skipped"
)

// Valid reports whether r is one of the known results.
func (r Result) Valid() bool {
	return r == ResultSuccess || r == ResultError || r == ResultSkipped
}

// Done reports whether a delivery with this result must not be processed again.
func (r Result) Done() bool { return r == ResultSuccess || r == ResultSkipped }

// Entry is one processed delivery.
type Entry struct {
	DeliveryID  string    `json:"delivery_id"`
	Source      string    `json:"source"`
	EventType   string    `json:"event_type"`
	EventAction string    `json:"event_action"`
	ReceivedAt  time.Time `json:"received_at"` // when the cloud took the webhook in
	ProcessedAt time.Time `json:"processed_at"`
	Result      Result    `json:"result"`
	// Attempts counts the runs this host recorded; CloudAttempt is the
	// cloud's attempt number of the last one.
	Attempts      int    `json:"attempts"`
	CloudAttempt  int    `json:"cloud_attempt"`
	Error         string `json:"error"`
	DurationMS    int64  `json:"duration_ms"`
	CorrelationID string `json:"correlation_id"`
	Handler       string `json:"handler"`
	// ResponseStatus is the forward target's HTTP status, ExitCode the exec
	// program's exit code; nil when there was none.
	ResponseStatus *int `json:"response_status"`
	ExitCode       *int `json:"exit_code"`
	// Retryable says, for an error, whether the host asked the cloud to
	// try again (its nack's retryable): true, the cloud hands it out again
	// after its retry delay unless that was its last attempt; false, the
	// cloud dead-letters it. nil for success and skipped, and for errors
	// recorded before the ledger kept it.
	Retryable *bool `json:"retryable,omitempty"`
	// Output is the start of the forward target's answer or the end of the
	// program's output (truncated), or why the webhook was skipped.
	Output string `json:"output"`
	// Summary is one line about the webhook ("pull_request.opened acme/app #7");
	// Fields are what the host read from its payload ("slack.thread_ts": "…").
	Summary string            `json:"summary"`
	Fields  map[string]string `json:"fields"`
}

const entryColumns = `delivery_id, source, event_type, event_action, received_at, processed_at, result,
	attempts, cloud_attempt, error, duration_ms, correlation_id, handler, response_status, exit_code,
	output, summary, fields, retryable`

type scanner interface{ Scan(dest ...any) error }

func scanEntry(s scanner) (Entry, error) {
	var (
		e                       Entry
		receivedAt, processedAt int64
		status, exitCode        sql.NullInt64
		retryable               sql.NullBool
		fields                  string
	)
	err := s.Scan(&e.DeliveryID, &e.Source, &e.EventType, &e.EventAction, &receivedAt, &processedAt, &e.Result,
		&e.Attempts, &e.CloudAttempt, &e.Error, &e.DurationMS, &e.CorrelationID, &e.Handler, &status, &exitCode,
		&e.Output, &e.Summary, &fields, &retryable)
	if err != nil {
		return Entry{}, err
	}
	if receivedAt != 0 {
		e.ReceivedAt = time.UnixMilli(receivedAt).UTC()
	}
	e.ProcessedAt = time.UnixMilli(processedAt).UTC()
	if status.Valid {
		e.ResponseStatus = ptr(int(status.Int64))
	}
	if exitCode.Valid {
		e.ExitCode = ptr(int(exitCode.Int64))
	}
	if retryable.Valid {
		e.Retryable = ptr(retryable.Bool)
	}
	if err := json.Unmarshal([]byte(fields), &e.Fields); err != nil {
		return Entry{}, fmt.Errorf("fields of %q: %w", e.DeliveryID, err)
	}
	if len(e.Fields) == 0 {
		e.Fields = nil
	}
	return e, nil
}

func ptr[T any](v T) *T { return &v }

// encodeFields writes fields as a JSON object, keys sorted, that reads back
// as json.Marshal's would (invalid UTF-8 becomes U+FFFD, as there); it
// spares the reflection of json.Marshal on every record.
func encodeFields(fields map[string]string) (string, error) {
	keys := make([]string, 0, len(fields))
	size := 2
	for k, v := range fields {
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonwalk.AppendString(b, k)
		b = append(b, ':')
		b = jsonwalk.AppendString(b, fields[k])
	}
	return string(append(b, '}')), nil
}

// nullable stores nil as NULL.
func nullable[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// DeliveryGet returns the ledger row of a delivery, or ErrNotFound.
func (l *Ledger) DeliveryGet(ctx context.Context, deliveryID string) (Entry, error) {
	e, err := scanEntry(l.get.QueryRowContext(ctx, deliveryID, deliveryID))
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("get delivery %q: %w", deliveryID, err)
	}
	return e, nil
}

// DeliveriesDone returns, of the given deliveries, those the ledger records
// as done (success or skipped) with their result: one query for a whole
// leased batch.
func (l *Ledger) DeliveriesDone(ctx context.Context, deliveryIDs []string) (map[string]Result, error) {
	done := map[string]Result{}
	if len(deliveryIDs) == 0 {
		return done, nil
	}
	ids, err := json.Marshal(deliveryIDs)
	if err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	rows, err := l.done.QueryContext(ctx, string(ids))
	if err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			r  Result
		)
		if err := rows.Scan(&id, &r); err != nil {
			return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
		}
		done[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	return done, nil
}

// RecordParams is the outcome of processing one delivery.
type RecordParams struct {
	// Entry is the ledger row. Its Attempts field is ignored: the ledger
	// counts attempts itself (1 on first record, +1 on each re-record).
	Entry Entry
	// Retryable is reported with the nack when Entry.Result is ResultError.
	Retryable bool
}

// DeliveryRecord writes a delivery's ledger row and queues its ack (success,
// skipped) or nack (error) in the outbox, in one transaction. A pending outbox
// entry of the same delivery is replaced. It returns the stored attempts count.
//
// Concurrent calls share one transaction (see Ledger); each returns once the
// transaction holding its record committed, or with its own error. A call
// whose ctx ends while the record still waits for the writer returns ctx's
// error and the record is not written; once the writer took it, the call
// waits for that transaction's outcome.
func (l *Ledger) DeliveryRecord(ctx context.Context, p RecordParams) (int, error) {
	e := p.Entry
	if !e.Result.Valid() {
		return 0, fmt.Errorf("record delivery %q: invalid result %q", e.DeliveryID, e.Result)
	}
	o := &op{kind: opRecord, entry: e, fields: "{}"}
	o.ob = OutboxEntry{DeliveryID: e.DeliveryID, Kind: OutboxAck, CreatedAt: e.ProcessedAt}
	o.entry.Retryable = nil
	if e.Result == ResultError {
		o.ob.Kind, o.ob.Error, o.ob.Retryable, o.ob.Attempt = OutboxNack, e.Error, p.Retryable, e.CloudAttempt
		o.entry.Retryable = ptr(p.Retryable)
	}
	if len(e.Fields) > 0 {
		fields, err := encodeFields(e.Fields)
		if err != nil {
			return 0, fmt.Errorf("record delivery %q: encode fields: %w", e.DeliveryID, err)
		}
		o.fields = fields
	}
	if err := l.submit(ctx, o); err != nil {
		return 0, fmt.Errorf("record delivery %q: %w", e.DeliveryID, err)
	}
	return o.attempts, nil
}

// DeliveryCount returns the number of rows in the ledger.
func (l *Ledger) DeliveryCount(ctx context.Context) (int, error) {
	var n int
	if err := l.read.QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count ledger: %w", err)
	}
	return n, nil
}

// ListParams filters DeliveryList. Zero values mean "no filter".
type ListParams struct {
	Result Result
	Source string
	Since  time.Time // processed at or after
	Limit  int       // required, > 0
	Cursor string    // from a previous page's next cursor
}

// DeliveryList returns ledger rows, newest first, and the cursor of the next
// page ("" when this page is the last). It returns ErrInvalidCursor for a
// cursor it cannot read.
func (l *Ledger) DeliveryList(ctx context.Context, p ListParams) ([]Entry, string, error) {
	if p.Limit <= 0 {
		return nil, "", fmt.Errorf("list deliveries: limit must be positive")
	}
	q, args, err := listQuery(p)
	if err != nil {
		return nil, "", err
	}
	rows, err := l.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	entries := []Entry{}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: %w", err)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list deliveries: %w", err)
	}
	var next string
	if len(entries) > p.Limit {
		entries = entries[:p.Limit]
		last := entries[len(entries)-1]
		next = encodeCursor(last.ProcessedAt.UnixMilli(), last.DeliveryID)
	}
	return entries, next, nil
}

// listQuery is DeliveryList's query of p, and its arguments.
func listQuery(p ListParams) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	if p.Result != "" {
		where, args = append(where, "result = ?"), append(args, p.Result)
		if p.Result != ResultSuccess {
			where = append(where, unsuccessful)
		}
	}
	if p.Source != "" {
		where, args = append(where, "source = ?"), append(args, p.Source)
	}
	if !p.Since.IsZero() {
		where, args = append(where, "processed_at >= ?"), append(args, p.Since.UnixMilli())
	}
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return "", nil, err
		}
		where, args = append(where, "(processed_at, delivery_id) < (?, ?)"), append(args, at, id)
	}
	q := `SELECT ` + entryColumns + ` FROM ledger`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY processed_at DESC, delivery_id DESC LIMIT ?`
	return q, append(args, p.Limit+1), nil
}

func encodeCursor(processedAtMS int64, deliveryID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(processedAtMS, 10) + "|" + deliveryID))
}

func decodeCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrInvalidCursor
	}
	ms, id, ok := strings.Cut(string(raw), "|")
	if !ok || id == "" {
		return 0, "", ErrInvalidCursor
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, "", ErrInvalidCursor
	}
	return at, id, nil
}

// ParseSince reads a "since" filter: an RFC 3339 time, or a positive
// duration ("1h", "30m") meaning that long before now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("invalid since %q: want an RFC 3339 time (2026-02-16T10:00:00Z) or a duration (1h, 30m)", v)
}
