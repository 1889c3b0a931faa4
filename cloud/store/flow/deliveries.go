package flow

import (
	"context"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// Deliveries implements, on DB, the reads of deliveries whose SQL both
// engines share: a host's counts by status, its next retry, and the
// replay guard's lookup by body digest. The rest of store.DeliveryStore is
// the engines' (leasing, inserts and transitions, each in its dialect and
// tuned to its planner) or Upkeep's.
type Deliveries struct{ DB DB }

func (d Deliveries) DeliveryCountByStatus(ctx context.Context, hostID string) (map[store.Status]int, error) {
	counts, err := All(ctx, d.DB.Read(), ScanCount[store.Status],
		`SELECT status, count(*) FROM deliveries WHERE host_id = $1 GROUP BY status`, hostID)
	if err != nil {
		return nil, fmt.Errorf("delivery count by status: %w", err)
	}
	return AddCounts(ZeroCounts(), counts), nil
}

func (d Deliveries) DeliveryNextRetryAt(ctx context.Context, hostID string) (*time.Time, error) {
	var next *time.Time
	err := d.DB.Read().QueryRow(ctx, `
		SELECT min(next_retry_at) FROM deliveries WHERE host_id = $1 AND status = 'retrying'`,
		hostID).Scan(d.DB.Times().NullTime(&next))
	if err != nil {
		return nil, fmt.Errorf("delivery next retry at: %w", err)
	}
	return next, nil
}

func (d Deliveries) DeliveryByDigest(ctx context.Context, p *store.DigestLookupParams) (*store.DigestMatch, error) {
	var m store.DigestMatch
	err := d.DB.Read().QueryRow(ctx, `
		SELECT delivery_id, event_id, received_at FROM deliveries
		WHERE host_id = $1 AND source = $2 AND body_sha256 = $3 AND received_at >= $4
		ORDER BY event_id = $5 DESC, received_at DESC LIMIT 1`,
		p.HostID, p.Source, p.Digest, d.DB.Time(p.Since), p.EventID).Scan(&m.DeliveryID, &m.EventID, d.DB.Times().Time(&m.ReceivedAt))
	if err != nil {
		return nil, fmt.Errorf("delivery by digest: %w", notFound(err))
	}
	return &m, nil
}
