package flow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// Alerts implements, on DB, the methods of store.AlertStore whose SQL both
// engines share: the lease of a job, presence, alerts and their rule
// settings, sinks and their outbox, and the intake 5xx counts. An engine
// embeds it in its Store and writes the rest itself (BacklogByHost,
// FailingSources and AlertList: each tuned to its planner).
type Alerts struct{ DB DB }

func (a Alerts) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error) {
	var holder string
	err := a.DB.Write().QueryRow(ctx, `
		INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder
		RETURNING holder`, p.Name, p.Holder, a.DB.Time(p.Until), a.DB.Time(p.Now)).Scan(&holder)
	if errors.Is(err, ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lease acquire: %w", err)
	}
	return holder == p.Holder, nil
}

func (a Alerts) LeaseRelease(ctx context.Context, name, holder string) error {
	if _, err := a.DB.Write().Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("lease release: %w", err)
	}
	return nil
}

func (a Alerts) LeasesHeld(ctx context.Context, prefix string, now time.Time) (int, error) {
	var n int
	err := a.DB.Read().QueryRow(ctx, `SELECT count(*) FROM leases WHERE substr(name, 1, length($1)) = $1 AND expires_at > $2`,
		prefix, a.DB.Time(now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("leases held: %w", err)
	}
	return n, nil
}

// --- presence ---

// presenceOf is the presence a host's last contact (else its claim, else
// its creation) gives, in SQL, of the hosts' row named t ("h." or "" for
// the table itself): at or after the late cut online, at or after the
// offline cut late, else offline (alert.PresenceConfig.Of in Go).
func presenceOf(t, lateCut, offlineCut string) string {
	at := "COALESCE(" + t + "last_heartbeat_at, " + t + "claimed_at, " + t + "created_at)"
	return `CASE WHEN ` + at + ` >= ` + lateCut + ` THEN 'online' WHEN ` + at + ` >= ` + offlineCut + ` THEN 'late' ELSE 'offline' END`
}

// hasPresence keeps the hosts that have a presence: active and claimed.
func hasPresence(t string) string {
	return t + "status = 'active' AND " + t + "credential_hash IS NOT NULL"
}

func (a Alerts) PresenceChanges(ctx context.Context, p *store.PresenceChangesParams) ([]*store.PresenceChange, error) {
	cs, err := All(ctx, a.DB.Read(), a.DB.Times().ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM hosts h LEFT JOIN host_presence p ON p.host_id = h.id
		WHERE `+hasPresence("h.")+`
		  AND COALESCE(p.state, '') <> `+presenceOf("h.", "$1", "$2")+`
		ORDER BY h.id LIMIT $3`,
		a.DB.Time(p.LateBefore), a.DB.Time(p.OfflineBefore), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence changes: %w", err)
	}
	return cs, nil
}

// valuesRows bounds the rows of one statement that inserts a list of
// values (presence events, alerts, their notices: at most seven parameters
// a row, well within either engine's limit).
const valuesRows = 100

func (a Alerts) PresenceSet(ctx context.Context, p *store.PresenceSetParams) ([]bool, error) {
	made := make([]bool, len(p.Changes))
	if len(p.Changes) == 0 {
		return made, nil
	}
	ids := make([]string, len(p.Changes))
	for i, c := range p.Changes {
		ids[i] = c.HostID
	}
	now := a.DB.Time(p.Now)
	err := a.DB.InTx(ctx, func(tx Executor) error {
		clear(made)
		type recorded struct {
			id    string
			state store.Presence
			since time.Time
		}
		recs, err := All(ctx, tx, func(r Scanner) (recorded, error) {
			var c recorded
			err := r.Scan(&c.id, &c.state, a.DB.Times().Time(&c.since))
			return c, err
		}, `SELECT host_id, state, since FROM host_presence WHERE `+a.DB.IsOneOf("host_id", "$1")+a.DB.ForUpdate(), a.DB.Strings(ids))
		if err != nil {
			return err
		}
		rec := make(map[string]recorded, len(recs))
		for _, c := range recs {
			rec[c.id] = c
		}

		// The changes that apply, each host's first: an update of its
		// recorded presence, or its first presence.
		lasted := make([]int64, len(p.Changes))
		updates, inserts := map[store.Presence][]string{}, map[store.Presence][]string{}
		first := map[string]int{}
		for i, c := range p.Changes {
			if _, seen := first[c.HostID]; seen {
				continue
			}
			r, ok := rec[c.HostID]
			switch {
			case c.From == "" && !ok:
				inserts[c.To] = append(inserts[c.To], c.HostID)
			case c.From != "" && ok && r.state == c.From:
				updates[c.To] = append(updates[c.To], c.HostID)
				lasted[i] = max(p.Now.Truncate(time.Millisecond).Sub(r.since).Milliseconds(), 0)
				made[i] = true
			default:
				continue
			}
			first[c.HostID] = i
		}
		for _, to := range slices.Sorted(maps.Keys(updates)) {
			if _, err := tx.Exec(ctx, `UPDATE host_presence SET state = $1, since = $2 WHERE `+a.DB.IsOneOf("host_id", "$3"),
				string(to), now, a.DB.Strings(updates[to])); err != nil {
				return err
			}
		}
		for _, to := range slices.Sorted(maps.Keys(inserts)) {
			// A host that is not stored inserts nothing; one recorded
			// meanwhile keeps its presence.
			added, err := All(ctx, tx, scanString, `INSERT INTO host_presence (host_id, state, since)
				SELECT id, $1, $2 FROM hosts WHERE `+a.DB.IsOneOf("id", "$3")+`
				ON CONFLICT (host_id) DO NOTHING RETURNING host_id`, string(to), now, a.DB.Strings(inserts[to]))
			if err != nil {
				return err
			}
			for _, id := range added {
				made[first[id]] = true
			}
		}

		events := valueRows{insert: `INSERT INTO host_presence_events (host_id, at, from_state, to_state, lasted_ms) VALUES `}
		for i, c := range p.Changes {
			if made[i] {
				if err := events.add(ctx, tx, c.HostID, now, string(c.From), string(c.To), lasted[i]); err != nil {
					return err
				}
			}
		}
		return events.flush(ctx, tx)
	})
	if err != nil {
		clear(made)
		return made, fmt.Errorf("presence set: %w", err)
	}
	return made, nil
}

func (a Alerts) PresenceList(ctx context.Context, p *store.PresenceListParams) ([]*store.PresenceChange, error) {
	cs, err := All(ctx, a.DB.Read(), a.DB.Times().ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE p.state = $1 AND h.status = 'active'
		ORDER BY p.since, h.id LIMIT $2`, string(p.State), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence list: %w", err)
	}
	return cs, nil
}

func (a Alerts) PresenceCounts(ctx context.Context) (map[store.Presence]int, error) {
	cs, err := All(ctx, a.DB.Read(), ScanCount[store.Presence], `SELECT p.state, count(*) FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE h.status = 'active' GROUP BY p.state`)
	if err != nil {
		return nil, fmt.Errorf("presence counts: %w", err)
	}
	return AddCounts(make(map[store.Presence]int, len(cs)), cs), nil
}

func (a Alerts) PresenceEventList(ctx context.Context, hostID string, limit int) ([]*store.PresenceEvent, error) {
	es, err := All(ctx, a.DB.Read(), a.DB.Times().ScanPresenceEvent, `SELECT id, host_id, at, from_state, to_state, lasted_ms FROM host_presence_events
		WHERE host_id = $1 ORDER BY id DESC LIMIT $2`, hostID, store.LimitOr(limit, 100))
	if err != nil {
		return nil, fmt.Errorf("presence event list: %w", err)
	}
	return es, nil
}

// --- alerts ---

// AlertColumns are the columns TimeColumns.ScanAlert reads.
const AlertColumns = `id, rule, alert_key, host_id, source, summary, started_at, last_sent_at, resolved_at`

// notice is an alert's payload to queue for every sink.
type notice struct {
	alertID int64
	payload []byte
	at      time.Time
}

// queueNotices queues each of ns for every sink, in order (each sink's
// queue is sent in order), a few rows a statement.
func (a Alerts) queueNotices(ctx context.Context, tx Executor, ns []notice) error {
	if len(ns) == 0 {
		return nil
	}
	sinks, err := All(ctx, tx, scanString, `SELECT id FROM alert_sinks ORDER BY created_at, id`)
	if err != nil {
		return err
	}
	outbox := valueRows{insert: `INSERT INTO alert_outbox (sink_id, alert_id, payload, created_at, next_at) VALUES `}
	for _, n := range ns {
		for _, sink := range sinks {
			at := a.DB.Time(n.at)
			if err := outbox.add(ctx, tx, sink, n.alertID, string(n.payload), at, at); err != nil {
				return err
			}
		}
	}
	return outbox.flush(ctx, tx)
}

// valueRows writes the rows added to one INSERT … VALUES, valuesRows a
// statement.
type valueRows struct {
	insert string // "INSERT INTO t (columns) VALUES "
	values []string
	args   []any
}

// add adds a row of values, writing the rows gathered once there are
// valuesRows of them.
func (v *valueRows) add(ctx context.Context, tx Executor, row ...any) error {
	v.values = append(v.values, rowOf(len(v.args), len(row)))
	v.args = append(v.args, row...)
	if len(v.values) == valuesRows {
		return v.flush(ctx, tx)
	}
	return nil
}

// rowOf is a row of n numbered parameters, after the first bound ones:
// "($4, $5)" of rowOf(3, 2).
func rowOf(bound, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", bound+i+1)
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// flush writes the rows gathered.
func (v *valueRows) flush(ctx context.Context, tx Executor) error {
	if len(v.values) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, v.insert+strings.Join(v.values, ", "), v.args...)
	v.values, v.args = v.values[:0], v.args[:0]
	return err
}

func scanString(r Scanner) (string, error) {
	var s string
	err := r.Scan(&s)
	return s, err
}

func (a Alerts) AlertFire(ctx context.Context, ps []*store.AlertFireParams) ([]*store.Alert, error) {
	fired := make([]*store.Alert, len(ps))
	if len(ps) == 0 {
		return fired, nil
	}
	err := a.DB.InTx(ctx, func(tx Executor) error {
		clear(fired) // a retried transaction starts over
		for lo := 0; lo < len(ps); lo += valuesRows {
			chunk := ps[lo:min(lo+valuesRows, len(ps))]
			at := make(map[[2]string]int, len(chunk))
			values := make([]string, 0, len(chunk))
			args := make([]any, 0, 7*len(chunk))
			for i, p := range chunk {
				k := [2]string{p.Rule, p.Key}
				if _, dup := at[k]; dup {
					continue
				}
				at[k] = lo + i
				values = append(values, rowOf(len(args), 7))
				args = append(args, p.Rule, p.Key, p.HostID, p.Source, p.Summary, a.DB.Time(p.Now), a.DB.Time(p.Now))
			}
			als, err := All(ctx, tx, a.DB.Times().ScanAlert, `
				INSERT INTO alerts (rule, alert_key, host_id, source, summary, started_at, last_sent_at)
				VALUES `+strings.Join(values, ", ")+`
				ON CONFLICT (rule, alert_key) WHERE resolved_at IS NULL DO NOTHING
				RETURNING `+AlertColumns, args...)
			if err != nil {
				return err
			}
			for _, al := range als {
				fired[at[[2]string{al.Rule, al.Key}]] = al
			}
		}
		notices := make([]notice, 0, len(ps))
		for i, al := range fired {
			if al == nil {
				continue
			}
			payload, err := ps[i].Payload(al)
			if err != nil {
				return err
			}
			notices = append(notices, notice{al.ID, payload, ps[i].Now})
		}
		return a.queueNotices(ctx, tx, notices)
	})
	if err != nil {
		return nil, fmt.Errorf("alert fire: %w", err)
	}
	return fired, nil
}

func (a Alerts) HostNames(ctx context.Context, ids []string) (map[string]string, error) {
	names := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return names, nil
	}
	rows, err := a.DB.Read().Query(ctx, `SELECT id, name FROM hosts WHERE `+a.DB.IsOneOf("id", "$1"), a.DB.Strings(ids))
	if err != nil {
		return nil, fmt.Errorf("host names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("host names: %w", err)
		}
		names[id] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host names: %w", err)
	}
	return names, nil
}

// alertNotices runs update, with the arguments args gives, for each of
// ps, and queues the payload of each it changed for every sink, in one
// transaction: a statement an alert, one commit.
func (a Alerts) alertNotices(ctx context.Context, what, update string, args func(*store.AlertNoticeParams) []any,
	ps []*store.AlertNoticeParams) ([]bool, error) {
	done := make([]bool, len(ps))
	if len(ps) == 0 {
		return done, nil
	}
	err := a.DB.InTx(ctx, func(tx Executor) error {
		clear(done)
		ns := make([]notice, 0, len(ps))
		for i, p := range ps {
			n, err := tx.Exec(ctx, update, args(p)...)
			if err != nil {
				return err
			}
			if n > 0 {
				done[i] = true
				ns = append(ns, notice{p.ID, p.Payload, p.Now})
			}
		}
		return a.queueNotices(ctx, tx, ns)
	})
	if err != nil {
		clear(done)
		return done, fmt.Errorf("%s: %w", what, err)
	}
	return done, nil
}

func (a Alerts) AlertRemind(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error) {
	return a.alertNotices(ctx, "alert remind", `UPDATE alerts SET last_sent_at = $1
		WHERE id = $2 AND resolved_at IS NULL AND last_sent_at = $3`,
		func(p *store.AlertNoticeParams) []any { return []any{a.DB.Time(p.Now), p.ID, a.DB.Time(p.LastSentAt)} }, ps)
}

func (a Alerts) AlertResolve(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error) {
	return a.alertNotices(ctx, "alert resolve", `UPDATE alerts SET resolved_at = $1, last_sent_at = $1
		WHERE id = $2 AND resolved_at IS NULL`,
		func(p *store.AlertNoticeParams) []any { return []any{a.DB.Time(p.Now), p.ID} }, ps)
}

// --- rule settings ---

func (a Alerts) AlertRuleSet(ctx context.Context, r *store.AlertRuleSetting) error {
	_, err := a.DB.Write().Exec(ctx, `INSERT INTO alert_rules (host_id, rule, disabled, threshold) VALUES ($1, $2, $3, $4)
		ON CONFLICT (host_id, rule) DO UPDATE SET disabled = excluded.disabled, threshold = excluded.threshold`,
		r.HostID, r.Rule, r.Disabled, r.Threshold)
	if err != nil {
		return fmt.Errorf("alert rule set: %w", err)
	}
	return nil
}

func (a Alerts) AlertRuleDelete(ctx context.Context, hostID, rule string) error {
	if _, err := a.DB.Write().Exec(ctx, `DELETE FROM alert_rules WHERE host_id = $1 AND rule = $2`, hostID, rule); err != nil {
		return fmt.Errorf("alert rule delete: %w", err)
	}
	return nil
}

func (a Alerts) AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error) {
	rs, err := All(ctx, a.DB.Read(), ScanAlertRuleSetting, `SELECT host_id, rule, disabled, threshold FROM alert_rules ORDER BY host_id, rule LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("alert rule list: %w", err)
	}
	return rs, nil
}
