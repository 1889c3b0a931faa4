package flow

import (
	"context"
	"fmt"
	"slices"

	"github.com/relaykit/relay/cloud/store"
)

// purgeBatch bounds purging and pruning per call, as the engines bound
// expiry, so that each statement stays short.
const purgeBatch = 1000

// Purge implements, on DB, the batched deletes of deliveries
// (store.DeliveryStore's DeliveryPurgeDLQ and DeliveryPrune). A batch is
// selected by the engine's row key (Dialect.RowKey), skipping rows other
// transactions hold (Dialect.SkipLocked), then deleted with what hangs on
// the deliveries: their bodies, audit trails and results go by the
// engine's cascades or triggers.
type Purge struct{ DB DB }

func (u Purge) DeliveryPurgeDLQ(ctx context.Context, p *store.DeliveryPurgeDLQParams) (int, error) {
	key := u.DB.RowKey()
	n, err := u.DB.Write().Exec(ctx, DeleteQuery(u.DB, `
		SELECT `+key+` FROM deliveries WHERE host_id = $1 AND status = $2 LIMIT $3`+u.DB.SkipLocked()),
		p.HostID, string(store.StatusDLQ), store.LimitOr(p.Limit, purgeBatch))
	if err != nil {
		return 0, fmt.Errorf("delivery purge dlq: %w", err)
	}
	return int(n), nil
}

func (u Purge) DeliveryPrune(ctx context.Context, p *store.DeliveryPruneParams) (int, error) {
	if !slices.Contains(store.PrunableStatuses, p.Status) {
		return 0, fmt.Errorf("delivery prune: status %q is not prunable", p.Status)
	}
	n, err := u.DB.Write().Exec(ctx, DeleteQuery(u.DB, PruneQuery(u.DB, p.Status)),
		u.DB.Time(p.Before), store.LimitOr(p.Limit, purgeBatch))
	if err != nil {
		return 0, fmt.Errorf("delivery prune: %w", err)
	}
	return int(n), nil
}

// PruneQuery selects a batch of deliveries in status (one of
// store.PrunableStatuses) last changed before $1, at most $2 of them. The
// status is part of the text, not a parameter: only then can the planner
// use that status's partial index (a parameter's value cannot be proved
// to meet its predicate).
func PruneQuery(d Dialect, status store.Status) string {
	return `SELECT ` + d.RowKey() + ` FROM deliveries WHERE status = '` + string(status) + `' AND updated_at < $1
		ORDER BY updated_at LIMIT $2` + d.SkipLocked()
}

// DeleteQuery deletes the deliveries whose row keys selectKeys selects.
func DeleteQuery(d Dialect, selectKeys string) string {
	return `DELETE FROM deliveries WHERE ` + d.RowKey() + ` IN (` + selectKeys + `)`
}
