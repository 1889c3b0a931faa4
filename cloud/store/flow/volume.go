package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// The volume is kept per hour, host and outcome in delivery_volume (host
// '' every host's sum), up to the time delivery_volume_folded holds:
// DeliveryVolumeFold moves that time on, a read adds what is kept to a
// count of what came since (store.VolumeStore).

// keptVolumeHours is how long the hours kept are: twice the longest
// window, so that a window never reads past them.
const keptVolumeHours = 2 * store.MaxVolumeHours

// volumeOutcomes are the outcomes kept.
var volumeOutcomes = []string{store.OutcomeReceived, store.OutcomeAcked, store.OutcomeFailed, store.OutcomeDeadLettered, store.OutcomeRejected}

// volumeCount is one row of a volume count: an outcome of a host (""
// every host) in an hour, from the window's start.
type volumeCount struct {
	outcome, host string
	hour, n       int
}

// countVolume runs the engine's count of r (Dialect.VolumeQuery).
func (d Deliveries) countVolume(ctx context.Context, r store.VolumeRange) ([]volumeCount, error) {
	q, args := d.DB.VolumeQuery(r)
	return All(ctx, d.DB.Read(), func(row Scanner) (volumeCount, error) {
		var c volumeCount
		var h, n int64
		err := row.Scan(&c.outcome, &c.host, &h, &n)
		c.hour, c.n = int(h), int(n)
		return c, err
	}, q, args...)
}

// keptVolume reads, in one statement (so that the two agree), the hours
// kept of host ("" every host) in [from, to), of outcome ("" every one),
// by host when host is nil, and up to when they are kept (nil: never
// folded).
func (d Deliveries) keptVolume(ctx context.Context, host *string, hosts []string, outcome string, from, to time.Time) ([]volumeCount, *time.Time, error) {
	q, args := KeptVolumeQuery(d.DB, host, hosts, outcome, d.DB.Time(from), d.DB.Time(to))
	type row struct {
		outcome, host string
		at            time.Time
		n             int64
	}
	rows, err := All(ctx, d.DB.Read(), func(r Scanner) (row, error) {
		var x row
		err := r.Scan(&x.outcome, &x.host, d.DB.Times().Time(&x.at), &x.n)
		return x, err
	}, q, args...)
	if err != nil {
		return nil, nil, err
	}
	var until *time.Time
	out := make([]volumeCount, 0, len(rows))
	for _, x := range rows {
		if x.outcome == "" {
			until = &x.at
			continue
		}
		out = append(out, volumeCount{outcome: x.outcome, host: x.host, hour: int(x.at.Sub(from) / time.Hour), n: int(x.n)})
	}
	return out, until, nil
}

// KeptVolumeQuery is keptVolume's query and its arguments: the hours
// kept in [from, to) (as the engine binds times) of host ("" every host;
// nil: each host, by host, of hosts only when it is not nil), of outcome
// ("" every one), and a row of outcome "" whose hour is up to when they
// are kept, if ever.
func KeptVolumeQuery(d Dialect, host *string, hosts []string, outcome string, from, to any) (string, []any) {
	args := []any{from, to}
	where := "hour >= $1 AND hour < $2"
	switch {
	case host != nil:
		args = append(args, *host)
		where += fmt.Sprintf(" AND host_id = $%d", len(args))
	case hosts != nil:
		args = append(args, d.Strings(hosts))
		where += " AND " + d.IsOneOf("host_id", fmt.Sprintf("$%d", len(args)))
	default:
		where += " AND host_id <> ''"
	}
	if outcome != "" {
		args = append(args, outcome)
		where += fmt.Sprintf(" AND outcome = $%d", len(args))
	}
	return `SELECT outcome, host_id, hour, n FROM delivery_volume WHERE ` + where + `
		UNION ALL SELECT '', '', until, 0 FROM delivery_volume_folded WHERE id = 1`, args
}

func (d Deliveries) DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error) {
	from, to, _, err := p.Window()
	if err != nil {
		return nil, err
	}
	outcome := ""
	if p.ReceivedOnly {
		outcome = store.OutcomeReceived
	}
	kept, since, err := d.keptVolume(ctx, &p.HostID, nil, outcome, from, to)
	if err != nil {
		return nil, fmt.Errorf("delivery volume: %w", err)
	}
	live, err := d.countVolume(ctx, store.VolumeRange{Base: from, From: latest(from, since), To: to, HostID: p.HostID, ReceivedOnly: p.ReceivedOnly})
	if err != nil {
		return nil, fmt.Errorf("delivery volume: %w", err)
	}
	all := append(kept, live...)
	return store.VolumeHours(p, func() (string, int, int, bool, error) {
		if len(all) == 0 {
			return "", 0, 0, false, nil
		}
		c := all[0]
		all = all[1:]
		return c.outcome, c.hour, c.n, true, nil
	})
}

func (d Deliveries) DeliveryVolumeByHost(ctx context.Context, p *store.DeliveryVolumeParams) (map[string][]int, error) {
	from, to, hours, err := p.Window()
	if err != nil {
		return nil, err
	}
	kept, since, err := d.keptVolume(ctx, nil, p.HostIDs, store.OutcomeReceived, from, to)
	if err != nil {
		return nil, fmt.Errorf("delivery volume by host: %w", err)
	}
	live, err := d.countVolume(ctx, store.VolumeRange{Base: from, From: latest(from, since), To: to, PerHost: true, ReceivedOnly: true})
	if err != nil {
		return nil, fmt.Errorf("delivery volume by host: %w", err)
	}
	// The live counts are read for every host: keep p.HostIDs' only.
	var of map[string]bool
	if p.HostIDs != nil {
		of = make(map[string]bool, len(p.HostIDs))
		for _, h := range p.HostIDs {
			of[h] = true
		}
	}
	out := map[string][]int{}
	for _, c := range append(kept, live...) {
		if c.hour < 0 || c.hour >= hours || of != nil && !of[c.host] {
			continue
		}
		if out[c.host] == nil {
			out[c.host] = make([]int, hours)
		}
		out[c.host][c.hour] += c.n
	}
	return out, nil
}

// latest is since when it is after t, else t.
func latest(t time.Time, since *time.Time) time.Time {
	if since != nil && since.After(t) {
		return *since
	}
	return t
}

// errFoldedMeanwhile: another replica moved the fold on first.
var errFoldedMeanwhile = errors.New("volume folded meanwhile")

func (d Deliveries) DeliveryVolumeFold(ctx context.Context, p *store.VolumeFoldParams) (int, error) {
	until := p.Until.UTC().Truncate(time.Millisecond)
	var folded *time.Time
	var at time.Time
	switch err := d.DB.Read().QueryRow(ctx, `SELECT until FROM delivery_volume_folded WHERE id = 1`).Scan(d.DB.Times().Time(&at)); {
	case err == nil:
		folded = &at
	case !errors.Is(err, ErrNoRows):
		return 0, fmt.Errorf("delivery volume fold: %w", err)
	}
	// Hours older than a window's reach are never counted: a store folded
	// for the first time, or after a long stop, starts a day back.
	start := until.Truncate(time.Hour).Add(-store.MaxVolumeHours * time.Hour)
	if folded != nil && folded.After(start) {
		start = *folded
	}
	if !start.Before(until) {
		return 0, nil
	}
	hour := start.Truncate(time.Hour)
	end := hour.Add(time.Hour) // an hour, or what is left of it, at a time
	if until.Before(end) {
		end = until
	}
	counts, err := d.countVolume(ctx, store.VolumeRange{Base: hour, From: start, To: end, PerHost: true})
	if err != nil {
		return 0, fmt.Errorf("delivery volume fold: %w", err)
	}
	// Each host's, and every host's under "".
	type key struct{ host, outcome string }
	sums := map[key]int{}
	for _, c := range counts {
		sums[key{c.host, c.outcome}] += c.n
		sums[key{"", c.outcome}] += c.n
	}
	err = d.DB.InTx(ctx, func(tx Executor) error {
		// Moved on only from where it was read: a replica that folded
		// the same span meanwhile has counted it.
		var moved int64
		var err error
		if folded == nil {
			moved, err = tx.Exec(ctx, `INSERT INTO delivery_volume_folded (id, until) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, d.DB.Time(end))
		} else {
			moved, err = tx.Exec(ctx, `UPDATE delivery_volume_folded SET until = $1 WHERE id = 1 AND until = $2`, d.DB.Time(end), d.DB.Time(*folded))
		}
		if err != nil {
			return err
		}
		if moved != 1 {
			return errFoldedMeanwhile
		}
		const perInsert = 200
		var vals []string
		var args []any
		flush := func() error {
			if len(vals) == 0 {
				return nil
			}
			_, err := tx.Exec(ctx, `INSERT INTO delivery_volume (hour, host_id, outcome, n) VALUES `+strings.Join(vals, ", ")+`
				ON CONFLICT (host_id, hour, outcome) DO UPDATE SET n = delivery_volume.n + excluded.n`, args...)
			vals, args = vals[:0], args[:0]
			return err
		}
		for k, n := range sums {
			i := len(args)
			vals = append(vals, fmt.Sprintf("($%d, $%d, $%d, $%d)", i+1, i+2, i+3, i+4))
			args = append(args, d.DB.Time(hour), k.host, k.outcome, n)
			if len(vals) == perInsert {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		if !start.Equal(hour) {
			return nil
		}
		// Once an hour, as a fold begins one: the hours no window reads
		// any more, found by the outcomes' index.
		_, err = tx.Exec(ctx, `DELETE FROM delivery_volume WHERE outcome IN ('`+strings.Join(volumeOutcomes, "', '")+`') AND hour < $1`,
			d.DB.Time(hour.Add(-keptVolumeHours*time.Hour)))
		return err
	})
	if errors.Is(err, errFoldedMeanwhile) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delivery volume fold: %w", err)
	}
	return len(sums) + 1, nil
}
