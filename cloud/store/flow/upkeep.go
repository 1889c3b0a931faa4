package flow

import (
	"context"
	"fmt"
	"slices"

	"github.com/relaykit/relay/cloud/store"
)

// Upkeep implements, on DB, the store's batched upkeep: DLQ purges and
// retention pruning of deliveries (DeliveryPurgeDLQ, DeliveryPrune) and
// the expiry of hosts' claim codes (HostExpireClaimCodes). A batch is
// selected first, skipping rows other transactions hold
// (Dialect.SkipLocked); deliveries by the engine's row key
// (Dialect.RowKey), deleted with what hangs on them: their bodies, audit
// trails and results go by the engine's cascades or triggers.
type Upkeep struct{ DB DB }

func (u Upkeep) DeliveryPurgeDLQ(ctx context.Context, p *store.DeliveryPurgeDLQParams) (int, error) {
	key := u.DB.RowKey()
	n, err := u.DB.Write().Exec(ctx, DeleteQuery(u.DB, `
		SELECT `+key+` FROM deliveries WHERE host_id = $1 AND status = $2 LIMIT $3`+u.DB.SkipLocked()),
		p.HostID, string(store.StatusDLQ), store.LimitOr(p.Limit, DefaultBatch))
	if err != nil {
		return 0, fmt.Errorf("delivery purge dlq: %w", err)
	}
	return int(n), nil
}

func (u Upkeep) DeliveryPrune(ctx context.Context, p *store.DeliveryPruneParams) (int, error) {
	if !slices.Contains(store.PrunableStatuses, p.Status) {
		return 0, fmt.Errorf("delivery prune: status %q is not prunable", p.Status)
	}
	n, err := u.DB.Write().Exec(ctx, DeleteQuery(u.DB, PruneQuery(u.DB, p.Status)),
		u.DB.Time(p.Before), store.LimitOr(p.Limit, DefaultBatch))
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

func (u Upkeep) HostExpireClaimCodes(ctx context.Context, p *store.HostExpireClaimCodesParams) (int, error) {
	n, err := u.DB.Write().Exec(ctx, `
		UPDATE hosts SET claim_code_hash = NULL, claim_expires_at = NULL
		WHERE id IN (
			SELECT id FROM hosts
			WHERE claim_code_hash IS NOT NULL AND claim_expires_at <= $1
			ORDER BY claim_expires_at
			LIMIT $2`+u.DB.SkipLocked()+`)`,
		u.DB.Time(p.Now), store.LimitOr(p.Limit, DefaultBatch))
	if err != nil {
		return 0, fmt.Errorf("host expire claim codes: %w", err)
	}
	return int(n), nil
}
