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
	// The hours folded are read as kept (DeliveryVolumeFold), what came
	// since is counted from the deliveries' indexes (VolumeRangeQuery).
	DeliveryVolume(ctx context.Context, p *DeliveryVolumeParams) ([]VolumeHour, error)
	// DeliveryVolumeByHost is each host's webhooks received per hour over
	// the same window (Hours, Now; HostID and ReceivedOnly are not read),
	// oldest hour first, by host id: the hosts with none are left out.
	DeliveryVolumeByHost(ctx context.Context, p *DeliveryVolumeParams) (map[string][]int, error)
	// DeliveryVolumeFold keeps the webhooks per hour, host and outcome of
	// what happened from the last fold up to at most Until, an hour or
	// less of it at a time (never more than MaxVolumeHours before Until:
	// older hours are charted by no one), and forgets the hours kept
	// longer than twice that. It returns how many counts it wrote (0: it
	// was already folded up to Until, or another replica folded at once).
	// Call it again while it writes some to catch up.
	DeliveryVolumeFold(ctx context.Context, p *VolumeFoldParams) (int, error)
}

// MaxVolumeHours bounds DeliveryVolume: a day of hourly buckets.
const MaxVolumeHours = 24

type DeliveryVolumeParams struct {
	HostID string // "": every host
	// HostIDs, for DeliveryVolumeByHost: of these hosts only; nil: every
	// host.
	HostIDs []string
	Hours   int // 1–MaxVolumeHours; 0: MaxVolumeHours
	// ReceivedOnly counts Received alone (the other outcomes stay zero):
	// what a sparkline of a host's traffic needs.
	ReceivedOnly bool
	Now          time.Time
}

// VolumeFoldParams says up to when DeliveryVolumeFold keeps the volume:
// a time by which everything before it was committed (the sweep's job
// leaves two minutes for that).
type VolumeFoldParams struct {
	Until time.Time
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
//   - Failed: their last attempt failed in the hour and they were waiting
//     for their next one when counted;
//   - DeadLettered: put in the dead-letter queue in the hour, and still
//     there when counted;
//   - Rejected: refused at intake in the hour (bad signature, …), never stored.
//
// Each is counted by the host that held it when counted. What happened
// before the last fold (DeliveryVolumeFold, every minute, up to two
// minutes ago) was counted then, and is kept as it was counted: a dead
// letter retried by hand later stays in its hour's DeadLettered, an acked
// delivery pruned by retention in its hour's Acked. What happened since
// is counted as it stands.
type VolumeHour struct {
	Start                                           time.Time
	Received, Acked, Failed, DeadLettered, Rejected int
}

// Total is the hour's count of every outcome.
func (h VolumeHour) Total() int { return h.Received + h.Acked + h.Failed + h.DeadLettered + h.Rejected }

// Outcome names, as VolumeRangeQuery's rows give them.
const (
	OutcomeReceived     = "received"
	OutcomeAcked        = "acked"
	OutcomeFailed       = "failed"
	OutcomeDeadLettered = "dead-lettered"
	OutcomeRejected     = "rejected"
)

// VolumeRange is a count of webhooks by outcome (and host) over [From, To),
// by hour counted from Base.
type VolumeRange struct {
	Base, From, To time.Time
	HostID         string // "": every host
	// PerHost counts each host apart (the fold's); else the host column
	// is "".
	PerHost      bool
	ReceivedOnly bool
}

// VolumeRangeQuery is the count of r: rows of (outcome, host id, hour
// index from Base, count), one per outcome, host and hour that has any.
// Each part reads an index over its time: receipt order (the host's, or
// everyone's), the partial index of the status (acked, retrying, dlq: on
// updated_at, when they entered it, and the host), the rejections' time
// (their host read from the row: rejections are few). Every part but
// everyone's receipts counted per host reads its index alone.
//
// The query has a ? for each of its arguments, in order. An engine gives
// its VolumeSQL.
func VolumeRangeQuery(r VolumeRange, e VolumeSQL) (string, []any) {
	var parts []string
	var args []any
	part := func(outcome, table, col, cond string) {
		where := []string{col + " >= ?", col + " < ?"}
		if cond != "" {
			where = append([]string{cond}, where...)
		}
		var a []any
		if r.HostID != "" {
			host := e.ByTime
			if col == "received_at" {
				host = "host_id = ?" // the host's receipt order
			}
			where = append([]string{host}, where...)
			a = append(a, r.HostID)
		}
		host, group := "''", ""
		if r.PerHost {
			host, group = "host_id", e.Host+", "
		}
		// Each row's hour is cheap to compute; its index from Base is
		// computed once per hour, on the grouped rows.
		parts = append(parts, `SELECT '`+outcome+`', h, `+e.Index("b")+`, n FROM (SELECT `+host+` AS h, `+e.Hour(col)+` AS b, count(*) AS n FROM `+table+
			` WHERE `+strings.Join(where, " AND ")+` GROUP BY `+group+`2) g`)
		args = append(args, e.At(r.Base))
		args = append(args, a...)
		args = append(args, e.At(r.From), e.At(r.To))
	}
	part(OutcomeReceived, "deliveries", "received_at", "")
	if r.ReceivedOnly {
		return parts[0], args
	}
	part(OutcomeAcked, "deliveries", "updated_at", "status = 'acked'")
	part(OutcomeFailed, "deliveries", "updated_at", "status = 'retrying'")
	part(OutcomeDeadLettered, "deliveries", "updated_at", "status = 'dlq'")
	part(OutcomeRejected, "rejections", "at", "")
	return strings.Join(parts, "\nUNION ALL\n"), args
}

// VolumeSQL is how an engine writes VolumeRangeQuery.
type VolumeSQL struct {
	// Hour is the hour a time column falls in, comparable and groupable.
	Hour func(col string) string
	// Index is an hour's index from Base, a ? taking Base as At writes it.
	Index func(hour string) string
	// At writes a time as a column value.
	At func(time.Time) any
	// ByTime is the condition on the host (one ?) that lets the time's
	// index lead: a host's acked deliveries of a day are fewer than those
	// it has kept.
	ByTime string
	// Host is host_id as a grouping term that leaves the time's index to
	// lead.
	Host string
}

// VolumeHours lays the rows of a window's counts (outcome, hour index
// from the window's start, count) out as DeliveryVolume answers them.
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
