package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.AlertStore = (*Store)(nil)

// cols reads times as SQLite stores them, in milliseconds.
var cols = store.Cols{
	Time:     func(t *time.Time) any { return timeCol{t} },
	NullTime: func(t **time.Time) any { return nullTimeCol{t} },
}

func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error) {
	var holder string
	err := s.write.QueryRowContext(ctx, `
		INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.expires_at <= ? OR leases.holder = excluded.holder
		RETURNING holder`, p.Name, p.Holder, dbTime(p.Until), dbTime(p.Now)).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lease acquire: %w", err)
	}
	return holder == p.Holder, nil
}

// --- presence ---

// presenceOf is the presence a host's last contact (else its claim, else
// its creation) gives, in SQL: ?1 is the late cut, ?2 the offline cut.
const presenceOf = `CASE WHEN COALESCE(h.last_heartbeat_at, h.claimed_at, h.created_at) >= ? THEN 'online'
	WHEN COALESCE(h.last_heartbeat_at, h.claimed_at, h.created_at) >= ? THEN 'late' ELSE 'offline' END`

func (s *Store) PresenceChanges(ctx context.Context, p *store.PresenceChangesParams) ([]*store.PresenceChange, error) {
	cs, err := queryAll(ctx, s.read, cols.ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM hosts h LEFT JOIN host_presence p ON p.host_id = h.id
		WHERE h.status = 'active' AND h.credential_hash IS NOT NULL
		  AND COALESCE(p.state, '') <> `+presenceOf+`
		ORDER BY h.id LIMIT ?`,
		dbTime(p.LateBefore), dbTime(p.OfflineBefore), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence changes: %w", err)
	}
	return cs, nil
}

func (s *Store) PresenceSet(ctx context.Context, p *store.PresenceSetParams) (bool, error) {
	changed := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var lasted int64
		if p.From == "" {
			res, err := tx.ExecContext(ctx, `INSERT INTO host_presence (host_id, state, since) VALUES (?, ?, ?)
				ON CONFLICT (host_id) DO NOTHING`, p.HostID, string(p.To), dbTime(p.Now))
			if err != nil {
				return interpretError(err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return nil
			}
		} else {
			var since int64
			err := tx.QueryRowContext(ctx, `SELECT since FROM host_presence WHERE host_id = ? AND state = ?`,
				p.HostID, string(p.From)).Scan(&since)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE host_presence SET state = ?, since = ? WHERE host_id = ?`,
				string(p.To), dbTime(p.Now), p.HostID); err != nil {
				return err
			}
			lasted = dbTime(p.Now) - since
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO host_presence_events (host_id, at, from_state, to_state, lasted_ms)
			VALUES (?, ?, ?, ?, ?)`, p.HostID, dbTime(p.Now), string(p.From), string(p.To), max(lasted, 0))
		changed = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("presence set: %w", err)
	}
	return changed, nil
}

func (s *Store) PresenceList(ctx context.Context, p *store.PresenceListParams) ([]*store.PresenceChange, error) {
	cs, err := queryAll(ctx, s.read, cols.ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE p.state = ? AND h.status = 'active'
		ORDER BY p.since, h.id LIMIT ?`, string(p.State), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence list: %w", err)
	}
	return cs, nil
}

func (s *Store) PresenceCounts(ctx context.Context) (map[store.Presence]int, error) {
	cs, err := queryAll(ctx, s.read, store.ScanPresenceCount, `SELECT p.state, count(*) FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE h.status = 'active' GROUP BY p.state`)
	if err != nil {
		return nil, fmt.Errorf("presence counts: %w", err)
	}
	return store.PresenceCountMap(cs), nil
}

func (s *Store) PresenceEventList(ctx context.Context, hostID string, limit int) ([]*store.PresenceEvent, error) {
	es, err := queryAll(ctx, s.read, cols.ScanPresenceEvent, `SELECT id, host_id, at, from_state, to_state, lasted_ms FROM host_presence_events
		WHERE host_id = ? ORDER BY id DESC LIMIT ?`, hostID, store.LimitOr(limit, 100))
	if err != nil {
		return nil, fmt.Errorf("presence event list: %w", err)
	}
	return es, nil
}

// --- what the rules look at ---

// backlogQuery is BacklogByHost's: one part per partial index (waiting to
// be leased, leased, dead letters), so that acked deliveries, nearly all of
// them, are never read. Grouping by +host_id keeps the planner from walking
// the (host_id, status) index, every delivery of it, for its order.
const backlogQuery = `
	SELECT host_id, SUM(pending), MIN(oldest), SUM(dlq), SUM(new_dlq) FROM (
		SELECT host_id, COUNT(*) AS pending, MIN(received_at) AS oldest, 0 AS dlq, 0 AS new_dlq
		FROM deliveries WHERE status IN ('queued', 'retrying') GROUP BY +host_id
		UNION ALL
		SELECT host_id, COUNT(*), MIN(received_at), 0, 0
		FROM deliveries WHERE status IN ('delivering', 'delivered') GROUP BY +host_id
		UNION ALL
		SELECT host_id, 0, NULL, COUNT(*), SUM(CASE WHEN dlq_at >= ? THEN 1 ELSE 0 END)
		FROM deliveries WHERE status = 'dlq' GROUP BY +host_id)
	GROUP BY host_id
	ORDER BY MIN(oldest) IS NULL, MIN(oldest), host_id LIMIT ?`

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	bs, err := queryAll(ctx, s.read, cols.ScanHostBacklog, backlogQuery, dbTime(p.DLQSince), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

// failingQuery reads the partial index of retrying deliveries alone.
// Grouped by plain host_id and source, the planner walked the dedupe key's
// index instead, for its order: every delivery ever kept, at each
// evaluation (every 15 s).
const failingQuery = `
	SELECT host_id, source, MAX(attempts), COUNT(*) FROM deliveries WHERE status = 'retrying'
	GROUP BY +host_id, +source HAVING MAX(attempts) >= ?
	ORDER BY MAX(attempts) DESC, host_id, source LIMIT ?`

func (s *Store) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	fs, err := queryAll(ctx, s.read, store.ScanSourceFailures, failingQuery, max(p.MinAttempts, 1), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("failing sources: %w", err)
	}
	return fs, nil
}

// --- alerts ---

const alertColumns = `id, rule, alert_key, host_id, source, summary, started_at, last_sent_at, resolved_at`

// queueNotice queues payload for every sink.
func queueNotice(ctx context.Context, tx *sql.Tx, alertID int64, payload []byte, now int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO alert_outbox (sink_id, alert_id, payload, created_at, next_at)
		SELECT id, ?, ?, ?, ? FROM alert_sinks ORDER BY created_at, id`, alertID, string(payload), now, now)
	return err
}

func (s *Store) AlertFire(ctx context.Context, p *store.AlertFireParams) (*store.Alert, bool, error) {
	var fired *store.Alert
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := dbTime(p.Now)
		a, err := cols.ScanAlert(tx.QueryRowContext(ctx, `
			INSERT INTO alerts (rule, alert_key, host_id, source, summary, started_at, last_sent_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (rule, alert_key) WHERE resolved_at IS NULL DO NOTHING
			RETURNING `+alertColumns, p.Rule, p.Key, p.HostID, p.Source, p.Summary, now, now))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		payload, err := p.Payload(a)
		if err != nil {
			return err
		}
		if err := queueNotice(ctx, tx, a.ID, payload, now); err != nil {
			return err
		}
		fired = a
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("alert fire: %w", err)
	}
	return fired, fired != nil, nil
}

func (s *Store) alertNotice(ctx context.Context, what, update string, args []any, p *store.AlertNoticeParams) (bool, error) {
	done := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, update, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		done = true
		return queueNotice(ctx, tx, p.ID, p.Payload, dbTime(p.Now))
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return done, nil
}

func (s *Store) AlertRemind(ctx context.Context, p *store.AlertNoticeParams) (bool, error) {
	return s.alertNotice(ctx, "alert remind", `UPDATE alerts SET last_sent_at = ?
		WHERE id = ? AND resolved_at IS NULL AND last_sent_at = ?`,
		[]any{dbTime(p.Now), p.ID, dbTime(p.LastSentAt)}, p)
}

func (s *Store) AlertResolve(ctx context.Context, p *store.AlertNoticeParams) (bool, error) {
	return s.alertNotice(ctx, "alert resolve", `UPDATE alerts SET resolved_at = ?, last_sent_at = ?
		WHERE id = ? AND resolved_at IS NULL`, []any{dbTime(p.Now), dbTime(p.Now), p.ID}, p)
}

// alertListQuery lists alerts before an id, newest first; firing, only
// those not resolved. Alerts are kept once resolved, so the firing list
// (the evaluator's, every 15 s) reads the partial index of firing alerts
// and sorts those few: the condition is written out, not bound, so that
// the index's applies, and the unary + on id keeps the planner from
// walking every alert ever raised, newest first, for the order. That walk
// took 16-19 ms at 100,000 resolved alerts; the index, 0.1 ms.
func alertListQuery(firing bool) string {
	if firing {
		return `SELECT ` + alertColumns + ` FROM alerts
			WHERE resolved_at IS NULL AND +id < ? ORDER BY +id DESC LIMIT ?`
	}
	return `SELECT ` + alertColumns + ` FROM alerts WHERE id < ? ORDER BY id DESC LIMIT ?`
}

func (s *Store) AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	as, err := queryAll(ctx, s.read, cols.ScanAlert, alertListQuery(p.Firing), before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert list: %w", err)
	}
	return as, nil
}

// --- rule settings ---

func (s *Store) AlertRuleSet(ctx context.Context, r *store.AlertRuleSetting) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO alert_rules (host_id, rule, disabled, threshold) VALUES (?, ?, ?, ?)
		ON CONFLICT (host_id, rule) DO UPDATE SET disabled = excluded.disabled, threshold = excluded.threshold`,
		r.HostID, r.Rule, r.Disabled, r.Threshold)
	if err != nil {
		return fmt.Errorf("alert rule set: %w", interpretError(err))
	}
	return nil
}

func (s *Store) AlertRuleDelete(ctx context.Context, hostID, rule string) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM alert_rules WHERE host_id = ? AND rule = ?`, hostID, rule); err != nil {
		return fmt.Errorf("alert rule delete: %w", err)
	}
	return nil
}

func (s *Store) AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error) {
	rs, err := queryAll(ctx, s.read, store.ScanAlertRuleSetting, `SELECT host_id, rule, disabled, threshold FROM alert_rules ORDER BY host_id, rule LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("alert rule list: %w", err)
	}
	return rs, nil
}

// --- sinks and the outbox ---

const sinkColumns = `s.id, s.kind, s.target, s.url_sealed, s.secret_sealed, s.created_at, s.sent, s.failures,
	s.failing_since, s.last_error, s.last_error_at`

func (s *Store) AlertSinkCreate(ctx context.Context, k *store.AlertSink) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO alert_sinks (id, kind, target, url_sealed, secret_sealed, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, k.ID, k.Kind, k.Target, k.URLSealed, k.SecretSealed, dbTime(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("alert sink create: %w", interpretError(err))
	}
	return nil
}

func (s *Store) AlertSinkList(ctx context.Context) ([]*store.AlertSink, error) {
	ks, err := queryAll(ctx, s.read, cols.ScanAlertSink, `SELECT `+sinkColumns+`, (SELECT COUNT(*) FROM alert_outbox o WHERE o.sink_id = s.id)
		FROM alert_sinks s ORDER BY s.created_at, s.id`)
	if err != nil {
		return nil, fmt.Errorf("alert sink list: %w", err)
	}
	return ks, nil
}

func (s *Store) AlertSinkReseal(ctx context.Context, p *store.AlertSinkResealParams) error {
	res, err := s.write.ExecContext(ctx, `UPDATE alert_sinks SET url_sealed = ?, secret_sealed = ? WHERE id = ?`,
		p.URLSealed, p.SecretSealed, p.ID)
	if err != nil {
		return fmt.Errorf("alert sink reseal: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("alert sink reseal: %w", store.ErrNotFound)
	}
	return nil
}

func (s *Store) AlertSinkDelete(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM alert_outbox WHERE sink_id = ?`, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM alert_sinks WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alert sink delete: %w", err)
	}
	return nil
}

func (s *Store) AlertOutboxDue(ctx context.Context, p *store.AlertOutboxDueParams) ([]*store.AlertNotification, error) {
	ns, err := queryAll(ctx, s.read, cols.ScanAlertNotification, `SELECT o.id, o.alert_id, o.payload, o.created_at, o.attempts, `+sinkColumns+`
		FROM alert_outbox o JOIN alert_sinks s ON s.id = o.sink_id
		WHERE o.id = (SELECT min(h.id) FROM alert_outbox h WHERE h.sink_id = o.sink_id) AND o.next_at <= ?
		ORDER BY o.id LIMIT ?`, dbTime(p.Now), store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert outbox due: %w", err)
	}
	return ns, nil
}

func (s *Store) AlertOutboxSent(ctx context.Context, p *store.AlertOutboxSentParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM alert_outbox WHERE id = ?`, p.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // taken by another sender
		}
		_, err = tx.ExecContext(ctx, `UPDATE alert_sinks SET sent = sent + 1, failures = 0, failing_since = NULL
			WHERE id = ?`, p.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("alert outbox sent: %w", err)
	}
	return nil
}

func (s *Store) AlertOutboxFailed(ctx context.Context, p *store.AlertOutboxFailedParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE alert_outbox SET attempts = attempts + 1, next_at = ? WHERE id = ?`,
			dbTime(p.NextAt), p.ID); err != nil {
			return err
		}
		now := dbTime(p.Now)
		_, err := tx.ExecContext(ctx, `UPDATE alert_sinks SET failures = failures + 1,
			failing_since = COALESCE(failing_since, ?), last_error = ?, last_error_at = ? WHERE id = ?`,
			now, store.CutError(p.Error), now, p.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("alert outbox failed: %w", err)
	}
	return nil
}

// --- intake 5xx ---

func (s *Store) Intake5xxAdd(ctx context.Context, p *store.Intake5xxAddParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM intake_5xx WHERE bucket < ?`, dbTime(p.PruneBefore)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO intake_5xx (bucket, replica, count) VALUES (?, ?, ?)
			ON CONFLICT (bucket, replica) DO UPDATE SET count = intake_5xx.count + excluded.count`,
			dbTime(store.MinuteOf(p.Now)), p.Replica, p.N)
		return err
	})
	if err != nil {
		return fmt.Errorf("intake 5xx add: %w", err)
	}
	return nil
}

func (s *Store) Intake5xxSum(ctx context.Context, p *store.Intake5xxSumParams) (int64, error) {
	var n int64
	if err := s.read.QueryRowContext(ctx, `SELECT COALESCE(SUM(count), 0) FROM intake_5xx WHERE bucket >= ?`,
		dbTime(p.Since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("intake 5xx sum: %w", err)
	}
	return n, nil
}
