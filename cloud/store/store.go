// Package store declares the storage the cloud needs — hosts, their sources,
// deliveries and each delivery's audit trail — and the delivery state machine.
// Engines live in subpackages (postgres, sqlite) and are held to one
// conformance suite (storetest); the transactions whose SQL they share are
// written once, in package flow, over an executor each engine implements.
package store

import (
	"context"
	"errors"
	"time"
)

// Domain errors every engine returns (wrapped or bare; test with errors.Is).
var (
	// ErrNotFound: the row does not exist, or is not visible to the caller
	// (another host's delivery).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique value is taken.
	ErrConflict = errors.New("conflict")
)

// MigrateResult is what a migration run did.
type MigrateResult struct {
	Applied int   // migrations applied by this run
	Version int64 // the schema version the database is at now
}

// Store is the cloud's storage. Every method takes the current time from its
// params where time matters, so tests drive time. Methods that change
// deliveries record each transition in the audit trail, in the same
// transaction.
type Store interface {
	// Migrate applies the engine's pending migrations; re-running is a no-op.
	Migrate(ctx context.Context) error
	// MigrateReport is Migrate, and says what it applied.
	MigrateReport(ctx context.Context) (MigrateResult, error)
	// Ping reports whether the database answers.
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close() error

	// HostCreate inserts a host with a claim code. ErrConflict if the id is taken.
	HostCreate(ctx context.Context, p *HostCreateParams) (*Host, error)
	// HostGet returns one host, or ErrNotFound.
	HostGet(ctx context.Context, id string) (*Host, error)
	// HostList returns all hosts, oldest first.
	HostList(ctx context.Context) ([]*Host, error)
	// HostListWithCounts returns a page of hosts, oldest first, each with
	// its deliveries counted by status (every status present, zeros
	// included), in one query that counts the page's hosts only.
	HostListWithCounts(ctx context.Context, p *HostPageParams) ([]*HostWithCounts, error)
	// HostUpdate changes a host's name and rate limits; nil fields are left
	// as they are. ErrNotFound for an unknown host.
	HostUpdate(ctx context.Context, p *HostUpdateParams) (*Host, error)
	// HostExpireClaimCodes clears claim codes that expired at or before Now,
	// at most Limit of them (0: 1000). Returns how many.
	HostExpireClaimCodes(ctx context.Context, p *HostExpireClaimCodesParams) (int, error)
	// HostClaim consumes a claim code: it finds the active host whose unexpired
	// claim code hash matches, stores the credential hash, clears the code and
	// bumps the generation (revoking earlier tokens). ErrNotFound when no such
	// code exists, it was used, or it expired.
	HostClaim(ctx context.Context, p *HostClaimParams) (*Host, error)
	// HostSetClaimCode gives an active host a new one-time claim code.
	// ErrNotFound for an unknown or deactivated host.
	HostSetClaimCode(ctx context.Context, p *HostSetClaimCodeParams) (*Host, error)
	// HostHeartbeat records a heartbeat: last_heartbeat_at, agent version and,
	// when Subscription is non-nil, the host's subscription. ErrNotFound for an
	// unknown host.
	HostHeartbeat(ctx context.Context, p *HostHeartbeatParams) error
	// HostDeactivate marks a host deactivated and bumps its generation.
	// ErrNotFound for an unknown host.
	HostDeactivate(ctx context.Context, p *HostDeactivateParams) (*Host, error)

	// SourceUpsert creates or replaces a host's source. ErrNotFound for an
	// unknown host.
	SourceUpsert(ctx context.Context, p *SourceUpsertParams) (*Source, error)
	// SourceGet returns one source, or ErrNotFound.
	SourceGet(ctx context.Context, hostID, name string) (*Source, error)
	// SourceList returns a host's sources ordered by name.
	SourceList(ctx context.Context, hostID string) ([]*Source, error)

	// DeliveryInsert stores a new delivery durably, deduplicating on
	// (host, source, event id). A repeat of a live or acked delivery returns
	// the first one with Outcome InsertDuplicate; a repeat of a dead-lettered
	// one revives it (queued, attempts reset; InsertRevived).
	DeliveryInsert(ctx context.Context, p *DeliveryInsertParams) (*DeliveryInsertResult, error)
	// DeliveryInsertBatch is DeliveryInsert for several deliveries in one
	// transaction: results[i] answers ps[i], as if each had been inserted
	// alone, in their order (a repeat within the batch is a duplicate of the
	// first). On error, results is nil when none of them was stored;
	// otherwise results[i] is non-nil for each insert that was stored (and
	// is final), and the error concerns the others.
	DeliveryInsertBatch(ctx context.Context, ps []*DeliveryInsertParams) ([]*DeliveryInsertResult, error)
	// DeliveryByDigest finds a delivery of the host and source stored with
	// BodyDigest p.Digest and received at or after p.Since: one with event
	// id p.EventID if there is one, else the latest. ErrNotFound if none.
	DeliveryByDigest(ctx context.Context, p *DigestLookupParams) (*DigestMatch, error)
	// DeliveryGet returns one of a host's deliveries with its body, or
	// ErrNotFound (also when it belongs to another host).
	DeliveryGet(ctx context.Context, hostID, id string) (*Delivery, error)
	// DeliveryList returns a host's deliveries, newest first, without bodies,
	// after the keyset cursor if one is given.
	DeliveryList(ctx context.Context, p *DeliveryListParams) ([]*Delivery, error)
	// DeliveryEventList returns a delivery's audit trail, oldest first.
	DeliveryEventList(ctx context.Context, deliveryID string) ([]*DeliveryEvent, error)
	// DeliveryCountByStatus counts a host's deliveries by status.
	DeliveryCountByStatus(ctx context.Context, hostID string) (map[Status]int, error)

	// DeliveryLease hands out a host's available deliveries (queued, or
	// retrying with next_retry_at <= Now), oldest received first, at most Max
	// of them and at most MaxBytes of raw body in all (a single larger one goes
	// alone). Each becomes delivering with a lease until Now+LeaseFor and one
	// more attempt. Concurrent callers never lease the same delivery.
	// More says whether available deliveries were left over.
	DeliveryLease(ctx context.Context, p *DeliveryLeaseParams) (*DeliveryLeaseResult, error)
	// DeliveryMarkDelivered moves leased deliveries from delivering to
	// delivered once the response carrying them was written.
	DeliveryMarkDelivered(ctx context.Context, p *DeliveryMarkDeliveredParams) (int, error)
	// DeliveryRelease fails the attempt of the host's deliveries among IDs
	// that are still delivering (the answer carrying them was not written),
	// as p.Fail decides (delivery.Release: TransitionRelease). Returns how
	// many changed.
	DeliveryRelease(ctx context.Context, p *DeliveryReleaseParams) (int, error)
	// DeliveryReleaseUnheld fails the attempt of the host's leased
	// deliveries (delivering or delivered) not in Held, as p.Fail decides
	// (delivery.ReleaseUnheld: TransitionAnswerLost): the host lost an
	// answer and holds only Held. Returns how many changed.
	DeliveryReleaseUnheld(ctx context.Context, p *DeliveryReleaseUnheldParams) (int, error)
	// DeliveryAck marks the host's deliveries acked. Deliveries of other hosts,
	// unknown ids and already-acked ones are left alone. Returns how many
	// changed.
	DeliveryAck(ctx context.Context, p *DeliveryAckParams) (int, error)
	// DeliveryNack records failed attempts of the host's leased deliveries
	// among IDs (TransitionNack allows them), each as p.Fail decides
	// (delivery.Nack). Returns how many changed.
	DeliveryNack(ctx context.Context, p *DeliveryNackParams) (int, error)
	// DeliveryExtend renews the lease of the host's leased deliveries to
	// Now+LeaseFor. Returns how many changed.
	DeliveryExtend(ctx context.Context, p *DeliveryExtendParams) (int, error)
	// DeliveryExpireLeases turns every lease that ended before Now
	// (TransitionExpire allows them) into a failed attempt, as p.Fail
	// decides (delivery.ExpireLeases), at most Limit of them. Returns how
	// many.
	DeliveryExpireLeases(ctx context.Context, p *DeliveryExpireLeasesParams) (int, error)
	// DeliveryReport applies a host's report in one transaction, in this
	// order: Ack, Nack, Extend, then ReleaseUnheld (each skipped when nil,
	// each as its own method would; their HostIDs must be the report's),
	// and records Results of the host's own deliveries (replacing the one
	// recorded before). Nothing is applied when it fails.
	DeliveryReport(ctx context.Context, p *DeliveryReportParams) (*DeliveryReportResult, error)
	// DeliveryRetry puts one of the host's dead-lettered or retrying
	// deliveries back in the queue with its attempts reset
	// (TransitionRetry). ErrNotFound when the host has no such delivery; a
	// *TransitionError (errors.Is ErrConflict) when it is in another status.
	DeliveryRetry(ctx context.Context, p *DeliveryRetryParams) (*Delivery, error)
	// DeliveryPurgeDLQ deletes the host's dead-lettered deliveries and their
	// audit trails, at most Limit of them (0: 1000). Returns how many.
	DeliveryPurgeDLQ(ctx context.Context, p *DeliveryPurgeDLQParams) (int, error)
	// DeliveryNextRetryAt is when the host's earliest retrying delivery
	// comes due, or nil when none is retrying.
	DeliveryNextRetryAt(ctx context.Context, hostID string) (*time.Time, error)
	// DeliveryListen calls p.Available with a host's id each time deliveries
	// become available to that host at once (received, revived, retried by
	// an operator) in any process sharing the database, and p.Changed when
	// the host's settings change, until ctx ends (nil) or the listener fails
	// (an error; call again). Wake-ups are hints: a missed one costs a
	// waiting heartbeat its wait, a spurious one a query; whoever caches
	// hosts should drop its cache when Listening is called again, since
	// changes made while it was not listening were not told.
	DeliveryListen(ctx context.Context, p *DeliveryListenParams) error
	// HostStopping tells every listener (DeliveryListenParams.Stopping) in
	// any process sharing the database, its own included, that the host
	// said it is stopping: its long polls answer at once. A hint, stored
	// nowhere.
	HostStopping(ctx context.Context, hostID string) error
	// SocketOpen records a new socket of the host as its one socket, with
	// an epoch greater than that of every socket opened before it by any
	// process sharing the database, and once committed tells every
	// listener (DeliveryListenParams.Socket, Open). Replaced is the epoch of
	// the socket it takes over when that one is still open in a live
	// process, which will close it when told; 0 when there is none.
	SocketOpen(ctx context.Context, hostID string) (*SocketOpenResult, error)
	// SocketClose forgets the host's socket of epoch, if it is still the
	// recorded one, and tells every listener that it closed (Socket, not
	// Open), whatever was recorded.
	SocketClose(ctx context.Context, hostID string, epoch int64) error
	// DeliveryPrune deletes deliveries in Status (one of PrunableStatuses)
	// that have not changed since before Before, with their audit trails, at
	// most Limit of them (0: 1000). Returns how many.
	DeliveryPrune(ctx context.Context, p *DeliveryPruneParams) (int, error)
	// DeliveryCountFold folds at most Limit (0: 1000) of the changes that
	// writers recorded to the counts of deliveries by host and status into
	// those counts, and says how many it folded. The counts read the same
	// before and after; what it saves is the next read's work. An engine
	// that keeps its counts in place folds none.
	DeliveryCountFold(ctx context.Context, p *DeliveryCountFoldParams) (int, error)
	// StatsOptimize refreshes the query planner's statistics where the
	// engine leaves that to the application (SQLite), and does nothing where
	// the engine keeps them itself (Postgres' autovacuum).
	StatsOptimize(ctx context.Context) error

	// The intake edge's own records (edge.go).
	EdgeStore
	// What operators read across hosts (inspect.go).
	InspectStore
	// Host presence and alerts (alert.go).
	AlertStore
	// The console's login sessions (console.go).
	ConsoleStore
	// What the console charts (volume.go).
	VolumeStore
	// Named sets of sender addresses (ipset.go).
	IPSetStore
	// Groups of hosts (groups.go).
	GroupStore
}
