package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.AlertStore = (*Store)(nil)

// cols reads timestamptz columns as times in UTC.
var cols = store.Cols{
	Time:     func(t *time.Time) any { return utcTime{t} },
	NullTime: func(t **time.Time) any { return utcNullTime{t} },
}

// utcTime scans a NOT NULL timestamptz column into a time in UTC.
type utcTime struct{ t *time.Time }

func (c utcTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		return errors.New("time column: NULL")
	}
	*c.t = v.Time.UTC()
	return nil
}

// utcNullTime scans a nullable timestamptz column into a *time.Time in
// UTC, nil for NULL.
type utcNullTime struct{ t **time.Time }

func (c utcNullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		*c.t = nil
		return nil
	}
	t := v.Time.UTC()
	*c.t = &t
	return nil
}

func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error) {
	var holder string
	err := s.pool.QueryRow(ctx, `
		INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder
		RETURNING holder`, p.Name, p.Holder, ms(p.Until), ms(p.Now)).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lease acquire: %w", err)
	}
	return holder == p.Holder, nil
}

// collect runs a query and scans every row with scan.
func collect[T any](ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, scan func(store.Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
}

// --- presence ---

// presenceOf is the presence a host's last contact (else its claim, else
// its creation) gives, in SQL: $1 is the late cut, $2 the offline cut.
const presenceOf = `CASE WHEN COALESCE(h.last_heartbeat_at, h.claimed_at, h.created_at) >= $1 THEN 'online'
	WHEN COALESCE(h.last_heartbeat_at, h.claimed_at, h.created_at) >= $2 THEN 'late' ELSE 'offline' END`

func (s *Store) PresenceChanges(ctx context.Context, p *store.PresenceChangesParams) ([]*store.PresenceChange, error) {
	cs, err := collect(ctx, s.pool, cols.ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM hosts h LEFT JOIN host_presence p ON p.host_id = h.id
		WHERE h.status = 'active' AND h.credential_hash IS NOT NULL
		  AND COALESCE(p.state, '') <> `+presenceOf+`
		ORDER BY h.id LIMIT $3`,
		ms(p.LateBefore), ms(p.OfflineBefore), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence changes: %w", err)
	}
	return cs, nil
}

func (s *Store) PresenceSet(ctx context.Context, p *store.PresenceSetParams) (bool, error) {
	changed := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var lasted time.Duration
		if p.From == "" {
			tag, err := tx.Exec(ctx, `INSERT INTO host_presence (host_id, state, since) VALUES ($1, $2, $3)
				ON CONFLICT (host_id) DO NOTHING`, p.HostID, string(p.To), ms(p.Now))
			if err != nil {
				return interpretError(err)
			}
			if tag.RowsAffected() == 0 {
				return nil
			}
		} else {
			var since time.Time
			err := tx.QueryRow(ctx, `SELECT since FROM host_presence WHERE host_id = $1 AND state = $2 FOR UPDATE`,
				p.HostID, string(p.From)).Scan(&since)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE host_presence SET state = $1, since = $2 WHERE host_id = $3`,
				string(p.To), ms(p.Now), p.HostID); err != nil {
				return err
			}
			lasted = ms(p.Now).Sub(since)
		}
		_, err := tx.Exec(ctx, `INSERT INTO host_presence_events (host_id, at, from_state, to_state, lasted_ms)
			VALUES ($1, $2, $3, $4, $5)`, p.HostID, ms(p.Now), string(p.From), string(p.To), max(lasted.Milliseconds(), 0))
		changed = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("presence set: %w", err)
	}
	return changed, nil
}

func (s *Store) PresenceList(ctx context.Context, p *store.PresenceListParams) ([]*store.PresenceChange, error) {
	cs, err := collect(ctx, s.pool, cols.ScanPresence, `
		SELECT h.id, h.last_heartbeat_at, h.claimed_at, p.state, p.since
		FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE p.state = $1 AND h.status = 'active'
		ORDER BY p.since, h.id LIMIT $2`, string(p.State), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("presence list: %w", err)
	}
	return cs, nil
}

func (s *Store) PresenceCounts(ctx context.Context) (map[store.Presence]int, error) {
	cs, err := collect(ctx, s.pool, store.ScanPresenceCount, `SELECT p.state, count(*) FROM host_presence p JOIN hosts h ON h.id = p.host_id
		WHERE h.status = 'active' GROUP BY p.state`)
	if err != nil {
		return nil, fmt.Errorf("presence counts: %w", err)
	}
	return store.PresenceCountMap(cs), nil
}

func (s *Store) PresenceEventList(ctx context.Context, hostID string, limit int) ([]*store.PresenceEvent, error) {
	es, err := collect(ctx, s.pool, cols.ScanPresenceEvent, `SELECT id, host_id, at, from_state, to_state, lasted_ms FROM host_presence_events
		WHERE host_id = $1 ORDER BY id DESC LIMIT $2`, hostID, store.LimitOr(limit, 100))
	if err != nil {
		return nil, fmt.Errorf("presence event list: %w", err)
	}
	return es, nil
}

// --- what the rules look at ---

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	// One part per partial index (waiting to be leased, leased, dead
	// letters): acked deliveries, nearly all of them, are never read.
	bs, err := collect(ctx, s.pool, cols.ScanHostBacklog, `
		SELECT host_id, sum(pending)::bigint, min(oldest), sum(dlq)::bigint, sum(new_dlq)::bigint FROM (
			SELECT host_id, count(*) AS pending, min(received_at) AS oldest, 0::bigint AS dlq, 0::bigint AS new_dlq
			FROM deliveries WHERE status IN ('queued', 'retrying') GROUP BY host_id
			UNION ALL
			SELECT host_id, count(*), min(received_at), 0, 0
			FROM deliveries WHERE status IN ('delivering', 'delivered') GROUP BY host_id
			UNION ALL
			SELECT host_id, 0, NULL, count(*), count(*) FILTER (WHERE dlq_at >= $1)
			FROM deliveries WHERE status = 'dlq' GROUP BY host_id) b
		GROUP BY host_id
		ORDER BY min(oldest) NULLS LAST, host_id LIMIT $2`,
		ms(p.DLQSince), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

func (s *Store) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	fs, err := collect(ctx, s.pool, store.ScanSourceFailures, `
		SELECT host_id, source, max(attempts), count(*) FROM deliveries WHERE status = 'retrying'
		GROUP BY host_id, source HAVING max(attempts) >= $1
		ORDER BY max(attempts) DESC, host_id, source LIMIT $2`, max(p.MinAttempts, 1), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("failing sources: %w", err)
	}
	return fs, nil
}

// --- alerts ---

const alertColumns = `id, rule, alert_key, host_id, source, summary, started_at, last_sent_at, resolved_at`

// queueNotice queues payload for every sink.
func queueNotice(ctx context.Context, tx pgx.Tx, alertID int64, payload []byte, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO alert_outbox (sink_id, alert_id, payload, created_at, next_at)
		SELECT id, $1, $2, $3, $3 FROM alert_sinks ORDER BY created_at, id`, alertID, string(payload), ms(now))
	return err
}

func (s *Store) AlertFire(ctx context.Context, p *store.AlertFireParams) (*store.Alert, bool, error) {
	var fired *store.Alert
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		fired = nil // a retried transaction starts over
		a, err := cols.ScanAlert(tx.QueryRow(ctx, `
			INSERT INTO alerts (rule, alert_key, host_id, source, summary, started_at, last_sent_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6)
			ON CONFLICT (rule, alert_key) WHERE resolved_at IS NULL DO NOTHING
			RETURNING `+alertColumns, p.Rule, p.Key, p.HostID, p.Source, p.Summary, ms(p.Now)))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		payload, err := p.Payload(a)
		if err != nil {
			return err
		}
		if err := queueNotice(ctx, tx, a.ID, payload, p.Now); err != nil {
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, update, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		done = true
		return queueNotice(ctx, tx, p.ID, p.Payload, p.Now)
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return done, nil
}

func (s *Store) AlertRemind(ctx context.Context, p *store.AlertNoticeParams) (bool, error) {
	return s.alertNotice(ctx, "alert remind", `UPDATE alerts SET last_sent_at = $1
		WHERE id = $2 AND resolved_at IS NULL AND last_sent_at = $3`,
		[]any{ms(p.Now), p.ID, ms(p.LastSentAt)}, p)
}

func (s *Store) AlertResolve(ctx context.Context, p *store.AlertNoticeParams) (bool, error) {
	return s.alertNotice(ctx, "alert resolve", `UPDATE alerts SET resolved_at = $1, last_sent_at = $1
		WHERE id = $2 AND resolved_at IS NULL`, []any{ms(p.Now), p.ID}, p)
}

func (s *Store) AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	as, err := collect(ctx, s.pool, cols.ScanAlert, `SELECT `+alertColumns+` FROM alerts
		WHERE (NOT $1 OR resolved_at IS NULL) AND id < $2 ORDER BY id DESC LIMIT $3`,
		p.Firing, before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert list: %w", err)
	}
	return as, nil
}

// --- rule settings ---

func (s *Store) AlertRuleSet(ctx context.Context, r *store.AlertRuleSetting) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO alert_rules (host_id, rule, disabled, threshold) VALUES ($1, $2, $3, $4)
		ON CONFLICT (host_id, rule) DO UPDATE SET disabled = excluded.disabled, threshold = excluded.threshold`,
		r.HostID, r.Rule, r.Disabled, r.Threshold)
	if err != nil {
		return fmt.Errorf("alert rule set: %w", interpretError(err))
	}
	return nil
}

func (s *Store) AlertRuleDelete(ctx context.Context, hostID, rule string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM alert_rules WHERE host_id = $1 AND rule = $2`, hostID, rule); err != nil {
		return fmt.Errorf("alert rule delete: %w", err)
	}
	return nil
}

func (s *Store) AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error) {
	rs, err := collect(ctx, s.pool, store.ScanAlertRuleSetting, `SELECT host_id, rule, disabled, threshold FROM alert_rules ORDER BY host_id, rule LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("alert rule list: %w", err)
	}
	return rs, nil
}

// --- sinks and the outbox ---

const sinkColumns = `s.id, s.kind, s.target, s.url_sealed, s.secret_sealed, s.created_at, s.sent, s.failures,
	s.failing_since, s.last_error, s.last_error_at`

func (s *Store) AlertSinkCreate(ctx context.Context, k *store.AlertSink) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO alert_sinks (id, kind, target, url_sealed, secret_sealed, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, k.ID, k.Kind, k.Target, k.URLSealed, k.SecretSealed, ms(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("alert sink create: %w", interpretError(err))
	}
	return nil
}

func (s *Store) AlertSinkList(ctx context.Context) ([]*store.AlertSink, error) {
	ks, err := collect(ctx, s.pool, cols.ScanAlertSink, `SELECT `+sinkColumns+`, (SELECT count(*) FROM alert_outbox o WHERE o.sink_id = s.id)
		FROM alert_sinks s ORDER BY s.created_at, s.id`)
	if err != nil {
		return nil, fmt.Errorf("alert sink list: %w", err)
	}
	return ks, nil
}

func (s *Store) AlertSinkReseal(ctx context.Context, p *store.AlertSinkResealParams) error {
	tag, err := s.pool.Exec(ctx, `UPDATE alert_sinks SET url_sealed = $1, secret_sealed = $2 WHERE id = $3`,
		p.URLSealed, p.SecretSealed, p.ID)
	if err != nil {
		return fmt.Errorf("alert sink reseal: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("alert sink reseal: %w", store.ErrNotFound)
	}
	return nil
}

func (s *Store) AlertSinkDelete(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM alert_outbox WHERE sink_id = $1`, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM alert_sinks WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
	ns, err := collect(ctx, s.pool, cols.ScanAlertNotification, `SELECT o.id, o.alert_id, o.payload, o.created_at, o.attempts, `+sinkColumns+`
		FROM alert_outbox o JOIN alert_sinks s ON s.id = o.sink_id
		WHERE o.id = (SELECT min(h.id) FROM alert_outbox h WHERE h.sink_id = o.sink_id) AND o.next_at <= $1
		ORDER BY o.id LIMIT $2`, ms(p.Now), store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert outbox due: %w", err)
	}
	return ns, nil
}

func (s *Store) AlertOutboxSent(ctx context.Context, p *store.AlertOutboxSentParams) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM alert_outbox WHERE id = $1`, p.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // taken by another sender
		}
		_, err = tx.Exec(ctx, `UPDATE alert_sinks SET sent = sent + 1, failures = 0, failing_since = NULL
			WHERE id = $1`, p.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("alert outbox sent: %w", err)
	}
	return nil
}

func (s *Store) AlertOutboxFailed(ctx context.Context, p *store.AlertOutboxFailedParams) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE alert_outbox SET attempts = attempts + 1, next_at = $1 WHERE id = $2`,
			ms(p.NextAt), p.ID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE alert_sinks SET failures = failures + 1,
			failing_since = COALESCE(failing_since, $1), last_error = $2, last_error_at = $1 WHERE id = $3`,
			ms(p.Now), store.CutError(p.Error), p.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("alert outbox failed: %w", err)
	}
	return nil
}

// --- intake 5xx ---

func (s *Store) Intake5xxAdd(ctx context.Context, p *store.Intake5xxAddParams) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM intake_5xx WHERE bucket < $1`, ms(p.PruneBefore)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO intake_5xx (bucket, replica, count) VALUES ($1, $2, $3)
			ON CONFLICT (bucket, replica) DO UPDATE SET count = intake_5xx.count + excluded.count`,
			store.MinuteOf(p.Now), p.Replica, p.N)
		return err
	})
	if err != nil {
		return fmt.Errorf("intake 5xx add: %w", err)
	}
	return nil
}

func (s *Store) Intake5xxSum(ctx context.Context, p *store.Intake5xxSumParams) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(count), 0)::bigint FROM intake_5xx WHERE bucket >= $1`,
		ms(p.Since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("intake 5xx sum: %w", err)
	}
	return n, nil
}
