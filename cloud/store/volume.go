package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// VolumeStore is what the console charts: webhooks per hour by outcome.
type VolumeStore interface {
	// DeliveryVolume counts the webhooks of the Hours (1–24; 0: 24) clock
	// hours up to the one holding Now, of every host or of HostID, by
	// outcome, oldest hour first: one VolumeHour per hour, zeros included.
	// Each count reads an index; see VolumeQuery.
	DeliveryVolume(ctx context.Context, p *DeliveryVolumeParams) ([]VolumeHour, error)
}

// MaxVolumeHours bounds DeliveryVolume: a day of hourly buckets.
const MaxVolumeHours = 24

type DeliveryVolumeParams struct {
	HostID string // "": every host
	Hours  int    // 1–MaxVolumeHours; 0: MaxVolumeHours
	// ReceivedOnly counts Received alone (the other outcomes stay zero):
	// what a sparkline of a host's traffic needs.
	ReceivedOnly bool
	Now          time.Time
}

// Window is the first hour's start and the end of the last (the hour
// holding Now), in UTC.
func (p *DeliveryVolumeParams) Window() (from, to time.Time, hours int, err error) {
	hours = p.Hours
	if hours == 0 {
		hours = MaxVolumeHours
	}
	if hours < 1 || hours > MaxVolumeHours {
		return time.Time{}, time.Time{}, 0, fmt.Errorf("delivery volume: hours %d: want 1 to %d", p.Hours, MaxVolumeHours)
	}
	to = p.Now.UTC().Truncate(time.Hour).Add(time.Hour)
	return to.Add(-time.Duration(hours) * time.Hour), to, hours, nil
}

// VolumeHour is one hour's webhooks by outcome:
//   - Received: stored in the hour (each webhook once, whatever became of it);
//   - Acked: acked by their host in the hour;
//   - Failed: retrying now, their last attempt failed in the hour;
//   - DeadLettered: in the dead-letter queue now, put there in the hour;
//   - Rejected: refused at intake in the hour (bad signature, …), never stored.
//
// Acked, Failed and DeadLettered count a webhook by the status it is in, at
// the time it entered it: one retried out of the queue leaves its hour's
// DeadLettered, one pruned by retention leaves its hour's Acked.
type VolumeHour struct {
	Start                                           time.Time
	Received, Acked, Failed, DeadLettered, Rejected int
}

// Total is the hour's count of every outcome.
func (h VolumeHour) Total() int { return h.Received + h.Acked + h.Failed + h.DeadLettered + h.Rejected }

// Outcome names, as VolumeQuery's rows give them.
const (
	OutcomeReceived     = "received"
	OutcomeAcked        = "acked"
	OutcomeFailed       = "failed"
	OutcomeDeadLettered = "dead-lettered"
	OutcomeRejected     = "rejected"
)

// VolumeQuery is DeliveryVolume's query: rows of (outcome, hour index from
// 0, count), one per outcome and hour that has any. Each part reads an
// index over its time, and only the index: receipt order (the host's, or
// everyone's), the partial index of the status (acked, retrying, dlq: on
// updated_at, when they entered it, and the host), the rejections' time
// (their host read from the row: rejections are few).
//
// The query has a ? for each of its arguments, in order. An engine gives
// its VolumeSQL.
func VolumeQuery(p *DeliveryVolumeParams, e VolumeSQL) (string, []any, error) {
	from, to, _, err := p.Window()
	if err != nil {
		return "", nil, err
	}
	var parts []string
	var args []any
	part := func(outcome, table, col, cond string) {
		where := []string{col + " >= ?", col + " < ?"}
		if cond != "" {
			where = append([]string{cond}, where...)
		}
		var a []any
		if p.HostID != "" {
			host := e.ByTime
			if col == "received_at" {
				host = "host_id = ?" // the host's receipt order
			}
			where = append([]string{host}, where...)
			a = append(a, p.HostID)
		}
		// Each row's hour is cheap to compute; its index from the window's
		// start is computed once per hour, on the grouped rows.
		parts = append(parts, `SELECT '`+outcome+`', `+e.Index("b")+`, n FROM (SELECT `+e.Hour(col)+` AS b, count(*) AS n FROM `+table+
			` WHERE `+strings.Join(where, " AND ")+` GROUP BY 1) g`)
		args = append(args, e.At(from))
		args = append(args, a...)
		args = append(args, e.At(from), e.At(to))
	}
	part(OutcomeReceived, "deliveries", "received_at", "")
	if p.ReceivedOnly {
		return parts[0], args, nil
	}
	part(OutcomeAcked, "deliveries", "updated_at", "status = 'acked'")
	part(OutcomeFailed, "deliveries", "updated_at", "status = 'retrying'")
	part(OutcomeDeadLettered, "deliveries", "updated_at", "status = 'dlq'")
	part(OutcomeRejected, "rejections", "at", "")
	return strings.Join(parts, "\nUNION ALL\n"), args, nil
}

// VolumeSQL is how an engine writes DeliveryVolume's query.
type VolumeSQL struct {
	// Hour is the hour a time column falls in, comparable and groupable.
	Hour func(col string) string
	// Index is an hour's index from the window's start, a ? taking the
	// start as At writes it.
	Index func(hour string) string
	// At writes a time as a column value.
	At func(time.Time) any
	// ByTime is the condition on the host (one ?) that lets the time's
	// index lead: a host's acked deliveries of a day are fewer than those
	// it has kept.
	ByTime string
}

// VolumeHours lays VolumeQuery's rows out as DeliveryVolume answers them.
// rows yields each row until it returns false.
func VolumeHours(p *DeliveryVolumeParams, rows func() (outcome string, hour, n int, ok bool, err error)) ([]VolumeHour, error) {
	from, _, hours, err := p.Window()
	if err != nil {
		return nil, err
	}
	out := make([]VolumeHour, hours)
	for i := range out {
		out[i].Start = from.Add(time.Duration(i) * time.Hour)
	}
	for {
		outcome, h, n, ok, err := rows()
		if err != nil {
			return nil, fmt.Errorf("delivery volume: %w", err)
		}
		if !ok {
			return out, nil
		}
		if h < 0 || h >= hours {
			continue // a time on an hour's edge, rounded by the engine
		}
		switch outcome {
		case OutcomeReceived:
			out[h].Received += n
		case OutcomeAcked:
			out[h].Acked += n
		case OutcomeFailed:
			out[h].Failed += n
		case OutcomeDeadLettered:
			out[h].DeadLettered += n
		case OutcomeRejected:
			out[h].Rejected += n
		}
	}
}
