package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
)

// DeliveryPrune deletes up to limit ledger rows processed before before,
// oldest first, and returns how many it deleted. A row whose outcome still
// waits in the outbox is kept until the cloud has it: the report carries
// the row's run, and the row is what says the delivery is done should the
// cloud hand it out again meanwhile. (The outbox is read once per call:
// NOT IN over a subquery that names no column of the row.)
func (l *Ledger) DeliveryPrune(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM ledger WHERE rowid IN (
			SELECT rowid FROM ledger WHERE processed_at < ? AND delivery_id NOT IN (SELECT delivery_id FROM outbox)
			ORDER BY processed_at LIMIT ?)`,
			before.UnixMilli(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune ledger: %w", err)
	}
	return int(n), nil
}

// Retention deletes ledger rows older than MaxAge, at start and then every
// Interval, until its context ends. A delivery pruned from the ledger is no
// longer recognised as done: keep MaxAge well beyond the cloud's retention.
//
// Rows are stamped with this host's clock, which may be off or jump. With
// CloudNow set, a row's age is measured against the earlier of this host's
// clock and the cloud's, so a host clock set ahead (or jumping ahead) never
// makes today's rows look old; until CloudNow knows the cloud's time, no
// row is pruned, and it asks again after a minute.
type Retention struct {
	Ledger   *Ledger
	MaxAge   time.Duration
	Interval time.Duration // default 1 h
	Batch    int           // rows per transaction (default 1000)
	Clock    clockwork.Clock
	// CloudNow returns the cloud's time now, and false while it is not
	// known (nil: this host's clock alone).
	CloudNow func() (time.Time, bool)
	Logger   *slog.Logger
}

// retentionWait is how soon retention asks again for the cloud's time.
const retentionWait = time.Minute

// Run prunes until ctx is done. A failed prune is logged and tried again at
// the next interval.
func (r *Retention) Run(ctx context.Context) {
	interval, batch := r.Interval, r.Batch
	if interval <= 0 {
		interval = time.Hour
	}
	if batch <= 0 {
		batch = 1000
	}
	for {
		next := interval
		if !r.prune(ctx, batch) {
			next = min(interval, retentionWait)
		}
		t := r.Clock.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}

// cutoff returns the time before which rows are pruned, and false while
// the cloud's time is not known.
func (r *Retention) cutoff() (time.Time, bool) {
	now := r.Clock.Now()
	if r.CloudNow != nil {
		cloud, ok := r.CloudNow()
		if !ok {
			return time.Time{}, false
		}
		if cloud.Before(now) {
			now = cloud
		}
	}
	return now.Add(-r.MaxAge), true
}

// prune makes one pass; it returns false when it could not tell the time.
func (r *Retention) prune(ctx context.Context, batch int) bool {
	before, ok := r.cutoff()
	if !ok {
		r.Logger.Debug("ledger retention waits for the cloud's time")
		return false
	}
	total := 0
	for ctx.Err() == nil {
		n, err := r.Ledger.DeliveryPrune(ctx, before, batch)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				r.Logger.Error("ledger retention failed", "err", err, "pruned", total)
			}
			return true
		}
		if n < batch {
			break
		}
	}
	if total > 0 {
		r.Logger.Info("ledger retention: old entries pruned", "pruned", total, "before", before.UTC().Format(time.RFC3339))
	}
	return true
}
