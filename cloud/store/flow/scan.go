package flow

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// TimeColumns is how an engine reads its time columns, the one kind of
// column the engines store differently (SQLite: INTEGER milliseconds;
// Postgres: timestamptz), as Scan destinations: Time(&t) is where a NOT
// NULL column goes, NullTime(&p) where a nullable one goes (NULL: nil).
// Every time read is in UTC. With it, one function reads a row of the
// alerting tables on either engine (the Scan… methods below).
type TimeColumns struct {
	Time     func(*time.Time) any  // a NOT NULL time column
	NullTime func(**time.Time) any // a nullable one; NULL is nil
}

// ScanPresence reads host id, last heartbeat, claim, recorded presence
// state (nullable) and since.
func (c TimeColumns) ScanPresence(row Scanner) (*store.PresenceChange, error) {
	var p store.PresenceChange
	var state *string
	if err := row.Scan(&p.HostID, c.NullTime(&p.LastContact), c.NullTime(&p.ClaimedAt), &state, c.NullTime(&p.Since)); err != nil {
		return nil, err
	}
	if state != nil {
		p.State = store.Presence(*state)
	}
	return &p, nil
}

// Count is how many rows a key has: a presence state's active hosts, a
// status's deliveries.
type Count[K ~string] struct {
	Key K
	N   int
}

// ScanCount reads a key and its count.
func ScanCount[K ~string](row Scanner) (Count[K], error) {
	var c Count[K]
	err := row.Scan(&c.Key, &c.N)
	return c, err
}

// AddCounts sets each key's count in out, and returns out.
func AddCounts[K ~string](out map[K]int, counts []Count[K]) map[K]int {
	for _, c := range counts {
		out[c.Key] = c.N
	}
	return out
}

// ScanPresenceEvent reads id, host id, at, from, to and lasted_ms.
func (c TimeColumns) ScanPresenceEvent(row Scanner) (*store.PresenceEvent, error) {
	var e store.PresenceEvent
	var lasted int64
	if err := row.Scan(&e.ID, &e.HostID, c.Time(&e.At), &e.From, &e.To, &lasted); err != nil {
		return nil, err
	}
	e.Lasted = store.Millis(lasted)
	return &e, nil
}

// ScanHostBacklog reads host id, pending, oldest pending (nullable), dlq
// and new dlq.
func (c TimeColumns) ScanHostBacklog(row Scanner) (*store.HostBacklog, error) {
	var b store.HostBacklog
	if err := row.Scan(&b.HostID, &b.Pending, c.NullTime(&b.OldestPending), &b.DLQ, &b.NewDLQ); err != nil {
		return nil, err
	}
	return &b, nil
}

// ScanSourceFailures reads host id, source, most attempts and retrying.
func ScanSourceFailures(row Scanner) (*store.SourceFailures, error) {
	var f store.SourceFailures
	if err := row.Scan(&f.HostID, &f.Source, &f.Attempts, &f.Retrying); err != nil {
		return nil, err
	}
	return &f, nil
}

// ScanAlert reads an alert's columns: id, rule, alert_key, host_id,
// source, summary, started_at, last_sent_at, resolved_at.
func (c TimeColumns) ScanAlert(row Scanner) (*store.Alert, error) {
	var a store.Alert
	err := row.Scan(&a.ID, &a.Rule, &a.Key, &a.HostID, &a.Source, &a.Summary, c.Time(&a.StartedAt),
		c.Time(&a.LastSentAt), c.NullTime(&a.ResolvedAt))
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// ScanAlertRuleSetting reads host id, rule, disabled and threshold.
func ScanAlertRuleSetting(row Scanner) (*store.AlertRuleSetting, error) {
	var r store.AlertRuleSetting
	if err := row.Scan(&r.HostID, &r.Rule, &r.Disabled, &r.Threshold); err != nil {
		return nil, err
	}
	return &r, nil
}

// sinkDest is where a sink's columns are read: id, kind, target,
// url_sealed, secret_sealed, created_at, sent, failures, failing_since,
// last_error, last_error_at.
func (c TimeColumns) sinkDest(k *store.AlertSink) []any {
	return []any{&k.ID, &k.Kind, &k.Target, &k.URLSealed, &k.SecretSealed, c.Time(&k.CreatedAt), &k.Sent,
		&k.Failures, c.NullTime(&k.FailingSince), &k.LastError, c.NullTime(&k.LastErrorAt)}
}

// ScanAlertSink reads a sink's columns, then how many notifications it
// has queued.
func (c TimeColumns) ScanAlertSink(row Scanner) (*store.AlertSink, error) {
	var k store.AlertSink
	if err := row.Scan(append(c.sinkDest(&k), &k.Queued)...); err != nil {
		return nil, err
	}
	return &k, nil
}

// ScanAlertNotification reads a notification's id, alert id, payload,
// created_at and attempts, then its sink's columns.
func (c TimeColumns) ScanAlertNotification(row Scanner) (*store.AlertNotification, error) {
	n := store.AlertNotification{Sink: &store.AlertSink{}}
	var payload string
	if err := row.Scan(append([]any{&n.ID, &n.AlertID, &payload, c.Time(&n.CreatedAt), &n.Attempts}, c.sinkDest(n.Sink)...)...); err != nil {
		return nil, err
	}
	n.Payload = []byte(payload)
	return &n, nil
}
