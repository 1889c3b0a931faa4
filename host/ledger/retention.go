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
// oldest first, and returns how many it deleted. Pending outbox entries are
// kept: an ack still goes out for a row pruned meanwhile.
func (l *Ledger) DeliveryPrune(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM ledger WHERE delivery_id IN (
			SELECT delivery_id FROM ledger WHERE processed_at < ? ORDER BY processed_at LIMIT ?)`,
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
type Retention struct {
	Ledger   *Ledger
	MaxAge   time.Duration
	Interval time.Duration // default 1 h
	Batch    int           // rows per transaction (default 1000)
	Clock    clockwork.Clock
	Logger   *slog.Logger
}

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
	t := r.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		r.prune(ctx, batch)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

func (r *Retention) prune(ctx context.Context, batch int) {
	before := r.Clock.Now().Add(-r.MaxAge)
	total := 0
	for ctx.Err() == nil {
		n, err := r.Ledger.DeliveryPrune(ctx, before, batch)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				r.Logger.Error("ledger retention failed", "err", err, "pruned", total)
			}
			return
		}
		if n < batch {
			break
		}
	}
	if total > 0 {
		r.Logger.Info("ledger retention: old entries pruned", "pruned", total, "before", before.UTC().Format(time.RFC3339))
	}
}
