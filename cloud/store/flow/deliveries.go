package flow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// The engines' defaults, and the columns they read deliveries by.
const (
	// DefaultLeaseMax is how many deliveries a lease takes when it names
	// no maximum.
	DefaultLeaseMax = 100
	// DefaultListLimit is the page of a list that names no limit.
	DefaultListLimit = 100
	// DefaultBatch bounds lease expiry, purging, pruning and claim-code
	// expiry per call, so that each transaction stays short.
	DefaultBatch = 1000

	// DeliveryColumns are a delivery's columns, in the order both engines
	// scan them.
	DeliveryColumns = `delivery_id, host_id, source, event_id, event_type, event_action, headers, body_size,
	status, attempts, max_attempts, retry_delays_ms, next_retry_at, lease_expires_at, last_error, received_at,
	delivered_at, acked_at, dlq_at, correlation_id, updated_at, group_id, lane`
	// FailingColumns are what the delivery core decides a failing attempt
	// from (store.Failing).
	FailingColumns = `delivery_id, host_id, status, attempts, max_attempts, retry_delays_ms, group_id, lane`
)

// InLeaseOrder sorts leased deliveries as a lease hands them out: oldest
// received first, then by id.
func InLeaseOrder(leased []*store.Delivery) {
	slices.SortFunc(leased, func(a, b *store.Delivery) int {
		if c := a.ReceivedAt.Compare(b.ReceivedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Deliveries implements, on DB, the reads of deliveries whose SQL both
// engines share: a host's counts by status (from the engine's counts,
// Dialect.DeliveryCounts), its next retry, the replay guard's lookup by
// body digest, and the volume chart's hours (volume.go, each count in the
// engine's query, Dialect.VolumeQuery). The rest of store.DeliveryStore is
// the engines' (leasing, inserts and transitions, each in its dialect and
// tuned to its planner) or Upkeep's.
type Deliveries struct{ DB DB }

func (d Deliveries) DeliveryCountByStatus(ctx context.Context, hostID string) (map[store.Status]int, error) {
	counts, err := All(ctx, d.DB.Read(), ScanCount[store.Status], CountByStatusQuery(d.DB), hostID)
	if err != nil {
		return nil, fmt.Errorf("delivery count by status: %w", err)
	}
	return AddCounts(ZeroCounts(), counts), nil
}

// CountByStatusQuery is DeliveryCountByStatus' query: the host ($1)'s
// counts the engine keeps (Dialect.DeliveryCounts), by status, not its
// deliveries counted.
func CountByStatusQuery(d Dialect) string {
	return `SELECT status, CAST(sum(n) AS bigint) FROM ` + d.DeliveryCounts("host_id = $1") + ` GROUP BY status`
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
	// A host's own deliveries, or a group's (any member's), each by its
	// partial index.
	owner, id := "host_id = $1 AND group_id = ''", p.HostID
	if p.GroupID != "" {
		owner, id = "group_id = $1 AND group_id <> ''", p.GroupID
	}
	err := d.DB.Read().QueryRow(ctx, `
		SELECT delivery_id, event_id, received_at FROM deliveries
		WHERE `+owner+` AND source = $2 AND body_sha256 = $3 AND received_at >= $4
		ORDER BY event_id = $5 DESC, received_at DESC LIMIT 1`,
		id, p.Source, p.Digest, d.DB.Time(p.Since), p.EventID).Scan(&m.DeliveryID, &m.EventID, d.DB.Times().Time(&m.ReceivedAt))
	if err != nil {
		return nil, fmt.Errorf("delivery by digest: %w", notFound(err))
	}
	return &m, nil
}
