package flow

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// sinkColumns are the columns of a sink s that TimeColumns.ScanAlertSink
// and ScanAlertNotification read.
const sinkColumns = `s.id, s.kind, s.target, s.url_sealed, s.secret_sealed, s.created_at, s.sent, s.failures,
	s.failing_since, s.last_error, s.last_error_at`

func (a Alerts) AlertSinkCreate(ctx context.Context, k *store.AlertSink) error {
	_, err := a.DB.Write().Exec(ctx, `INSERT INTO alert_sinks (id, kind, target, url_sealed, secret_sealed, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, k.ID, k.Kind, k.Target, k.URLSealed, k.SecretSealed, a.DB.Time(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("alert sink create: %w", err)
	}
	return nil
}

func (a Alerts) AlertSinkList(ctx context.Context) ([]*store.AlertSink, error) {
	ks, err := All(ctx, a.DB.Read(), a.DB.Times().ScanAlertSink, `SELECT `+sinkColumns+`, (SELECT count(*) FROM alert_outbox o WHERE o.sink_id = s.id)
		FROM alert_sinks s ORDER BY s.created_at, s.id`)
	if err != nil {
		return nil, fmt.Errorf("alert sink list: %w", err)
	}
	return ks, nil
}

func (a Alerts) AlertSinkReseal(ctx context.Context, p *store.AlertSinkResealParams) error {
	n, err := a.DB.Write().Exec(ctx, `UPDATE alert_sinks SET url_sealed = $1, secret_sealed = $2 WHERE id = $3`,
		p.URLSealed, p.SecretSealed, p.ID)
	if err != nil {
		return fmt.Errorf("alert sink reseal: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("alert sink reseal: %w", store.ErrNotFound)
	}
	return nil
}

func (a Alerts) AlertSinkDelete(ctx context.Context, id string) error {
	err := a.DB.InTx(ctx, func(tx Executor) error {
		if _, err := tx.Exec(ctx, `DELETE FROM alert_outbox WHERE sink_id = $1`, id); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `DELETE FROM alert_sinks WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alert sink delete: %w", err)
	}
	return nil
}

func (a Alerts) AlertOutboxDue(ctx context.Context, p *store.AlertOutboxDueParams) ([]*store.AlertNotification, error) {
	ns, err := All(ctx, a.DB.Read(), a.DB.Times().ScanAlertNotification, `SELECT o.id, o.alert_id, o.payload, o.created_at, o.attempts, `+sinkColumns+`
		FROM alert_outbox o JOIN alert_sinks s ON s.id = o.sink_id
		WHERE o.id = (SELECT min(h.id) FROM alert_outbox h WHERE h.sink_id = o.sink_id) AND o.next_at <= $1
		ORDER BY o.id LIMIT $2`, a.DB.Time(p.Now), store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert outbox due: %w", err)
	}
	return ns, nil
}

func (a Alerts) AlertOutboxSent(ctx context.Context, p *store.AlertOutboxSentParams) error {
	err := a.DB.InTx(ctx, func(tx Executor) error {
		n, err := tx.Exec(ctx, `DELETE FROM alert_outbox WHERE id = $1`, p.ID)
		if err != nil {
			return err
		}
		if n == 0 {
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

func (a Alerts) AlertOutboxFailed(ctx context.Context, p *store.AlertOutboxFailedParams) error {
	err := a.DB.InTx(ctx, func(tx Executor) error {
		if _, err := tx.Exec(ctx, `UPDATE alert_outbox SET attempts = attempts + 1, next_at = $1 WHERE id = $2`,
			a.DB.Time(p.NextAt), p.ID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE alert_sinks SET failures = failures + 1,
			failing_since = COALESCE(failing_since, $1), last_error = $2, last_error_at = $1 WHERE id = $3`,
			a.DB.Time(p.Now), store.CutError(p.Error), p.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("alert outbox failed: %w", err)
	}
	return nil
}

// --- intake 5xx ---

func (a Alerts) Intake5xxAdd(ctx context.Context, p *store.Intake5xxAddParams) error {
	err := a.DB.InTx(ctx, func(tx Executor) error {
		if _, err := tx.Exec(ctx, `DELETE FROM intake_5xx WHERE bucket < $1`, a.DB.Time(p.PruneBefore)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO intake_5xx (bucket, replica, count) VALUES ($1, $2, $3)
			ON CONFLICT (bucket, replica) DO UPDATE SET count = intake_5xx.count + excluded.count`,
			a.DB.Time(store.MinuteOf(p.Now)), p.Replica, p.N)
		return err
	})
	if err != nil {
		return fmt.Errorf("intake 5xx add: %w", err)
	}
	return nil
}

func (a Alerts) Intake5xxSum(ctx context.Context, p *store.Intake5xxSumParams) (int64, error) {
	var n int64
	if err := a.DB.Read().QueryRow(ctx, `SELECT CAST(COALESCE(SUM(count), 0) AS BIGINT) FROM intake_5xx WHERE bucket >= $1`,
		a.DB.Time(p.Since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("intake 5xx sum: %w", err)
	}
	return n, nil
}
