package store

import "time"

type Delivery struct {
	ID             string // delivery_id: {source}:{event_id}:{received_ms}
	HostID         string
	Source         string
	EventID        string // the provider's id; the dedupe key with host and source
	EventType      string
	EventAction    string
	Headers        map[string]string
	RawBody        []byte // nil in list results
	BodySize       int
	Status         Status
	Attempts       int
	MaxAttempts    int
	RetryDelays    []time.Duration // the schedule snapshotted at intake; nil: the default policy
	NextRetryAt    *time.Time
	LeaseExpiresAt *time.Time
	LastError      string
	ReceivedAt     time.Time
	DeliveredAt    *time.Time
	AckedAt        *time.Time
	DLQAt          *time.Time
	CorrelationID  string
	UpdatedAt      time.Time
	// GroupID is the group whose URL received it ("": a host's own); Lane
	// the member of a fanout delivery ("" for an any delivery, which
	// HostID holds until it is handed to another member).
	GroupID string
	Lane    string
}

type DeliveryInsertParams struct {
	ID          string
	HostID      string
	Source      string
	EventID     string
	EventType   string
	EventAction string
	Headers     map[string]string
	RawBody     []byte
	// RetryDelays is the retry schedule snapshotted on the delivery (usually
	// its source's); nacks and lease expiry follow it. nil: the default policy.
	RetryDelays []time.Duration
	// MaxAttempts: 0 means len(RetryDelays), or the default policy's.
	MaxAttempts   int
	CorrelationID string
	// ReceiveNote, when not empty, is appended to the reason of the
	// "received" audit event, e.g. "received (over the host's rate limit)".
	ReceiveNote string
	ReceivedAt  time.Time // also "now"
	// Lease, when set, stores a new delivery already leased to the
	// connection that reserved room for it (see InsertLease). A repeat of
	// a stored event (duplicate or revived) is not leased.
	Lease *InsertLease
	// ReplayOf, when set, says the delivery replays another one: when it
	// is stored new, the other one's audit trail gets ReplayOf.Note (its
	// status unchanged) in the same transaction. A delivery gone
	// meanwhile (pruned) gets nothing; the replay is stored all the same.
	ReplayOf *ReplayOf
	// BodyDigest, when set, is stored with the delivery (the SHA-256 of
	// RawBody, set for replay-guarded sources only) for DeliveryByDigest.
	BodyDigest []byte
	// GroupID makes it a group's delivery, held by HostID; Lane is the
	// member of a fanout delivery ("" for an any delivery). Its dedupe key
	// is (group, source, event id, lane).
	GroupID string
	Lane    string
	// Share, when set, is a fanout's: the deliveries with the same Share
	// stored in one batch keep one copy of their body.
	Share *BodyShare
	// Packed is RawBody in the form the engine stores it, for an engine
	// that packs bodies itself (BodyPacker) and did so before the insert
	// was queued; nil: the engine packs it as it writes.
	Packed *PackedBody
}

// PackedBody is a body in an engine's stored form: Data in Codec's
// encoding (the engine's own numbering).
type PackedBody struct {
	Data  []byte
	Codec int64
}

// BodyShare ties the deliveries of one fanout together (by its address):
// stored in one batch, they share one stored body.
type BodyShare struct{ _ byte }

// DigestLookupParams asks for a delivery by its body's digest.
type DigestLookupParams struct {
	HostID  string
	GroupID string // set: a group's deliveries, whichever member holds them (HostID unused)
	Source  string
	Digest  []byte
	Since   time.Time
	EventID string // preferred: the event being admitted
}

// DigestMatch is a delivery found by its body's digest.
type DigestMatch struct {
	DeliveryID string
	EventID    string
	ReceivedAt time.Time
}

// ReplayOf names the delivery a replay was made from, and the note its
// audit trail gets.
type ReplayOf struct {
	HostID, ID string
	Note       string
}

// InsertLease leases a delivery as it is stored: the row and audit trail
// are those of a delivery received and then leased (TransitionLease) in
// the same millisecond, its lease lasting For. The delivery core builds
// it; engines only write it (InsertRow).
type InsertLease struct {
	For time.Duration
	Via Via // the transport that carries it (its lease event's reason)
}

// InsertOutcome says what DeliveryInsert did.
type InsertOutcome string

const (
	InsertQueued    InsertOutcome = "queued"
	InsertDuplicate InsertOutcome = "duplicate"
	InsertRevived   InsertOutcome = "revived"
)

type DeliveryInsertResult struct {
	Delivery *Delivery // the stored delivery (the first one, for a duplicate)
	Outcome  InsertOutcome
}

type DeliveryListParams struct {
	HostID string
	Status Status // "": any
	Source string // "": any
	Limit  int
	// Keyset cursor: deliveries strictly older than (BeforeReceivedAt, BeforeID).
	BeforeReceivedAt *time.Time
	BeforeID         string
}

// DeliveryEvent is one entry of a delivery's audit trail.
type DeliveryEvent struct {
	ID         int64
	DeliveryID string
	At         time.Time
	From       Status // "" for the first event
	To         Status
	Reason     string
	Attempt    int
}

type DeliveryLeaseParams struct {
	HostID   string
	Via      Via // the transport that carries them (the audit reason); "": a heartbeat
	Max      int
	MaxBytes int
	LeaseFor time.Duration
	Now      time.Time
}

// DeliveryLeaseResult is one leased batch.
type DeliveryLeaseResult struct {
	Deliveries []*Delivery // oldest received first, with bodies
	More       bool        // available deliveries were left over
}

type DeliveryMarkDeliveredParams struct {
	HostID string
	IDs    []string
	Now    time.Time
}

// The params of failed attempts (release, nack, expiry) are built by the
// delivery core (delivery.Release, …), whose Fail decides each one.

type DeliveryReleaseParams struct {
	HostID string
	IDs    []string
	Fail   FailFunc
	Now    time.Time
}

type DeliveryReleaseUnheldParams struct {
	HostID string
	Held   []string
	Fail   FailFunc
	Now    time.Time
}

type DeliveryAckParams struct {
	HostID string
	IDs    []string
	// Written lists deliveries among IDs that were written to the host
	// and not yet marked delivered (delivery.Marker puts the mark off): one
	// still delivering is recorded delivered at its At, then acked, with
	// its two audit events, in one change of its row.
	Written []Written
	Now     time.Time
}

// Written is a delivery written to its host at At, its mark as delivered put off (DeliveryAckParams.Written).
type Written struct {
	ID string
	At time.Time
}

type DeliveryNackParams struct {
	HostID string
	IDs    []string // distinct
	Fail   FailFunc
	Now    time.Time
}

type DeliveryExtendParams struct {
	HostID   string
	IDs      []string
	LeaseFor time.Duration
	Now      time.Time
}

type DeliveryExpireLeasesParams struct {
	Fail  FailFunc
	Limit int // at most this many per call; 0: 1000
	Now   time.Time
}

// DeliveryReportParams is a host's report: its parts are applied in one
// transaction; nil parts are skipped.
type DeliveryReportParams struct {
	HostID        string
	Ack           *DeliveryAckParams
	Nack          *DeliveryNackParams
	Extend        *DeliveryExtendParams
	ReleaseUnheld *DeliveryReleaseUnheldParams
	// Results are what the host's ledger recorded of the runs it acks or
	// nacks; those of other hosts' deliveries are dropped.
	Results []DeliveryResult
}

// DeliveryReportResult says how many deliveries each part changed.
type DeliveryReportResult struct {
	Acked, Nacked, Extended, Released int
}

type DeliveryRetryParams struct {
	HostID string
	ID     string
	Now    time.Time
}

type DeliveryPurgeDLQParams struct {
	HostID string
	Limit  int // 0: 1000
}

type DeliveryListenParams struct {
	Listening func()              // called once the listener is in place; may be nil
	Available func(hostID string) // must not block
	// Changed, when set, is called with a host's id each time the host or
	// one of its sources was created or changed (HostCreate, HostUpdate,
	// HostDeactivate, HostHeartbeat with a subscription, SourceUpsert,
	// SourceSetSecrets), and with a group's id each time the group, its
	// members or its sources were (GroupCreate, GroupUpdate,
	// GroupDeactivate, GroupMemberAdd, GroupMemberRemove, SourceUpsert), in
	// any process sharing the database: what caches of them must drop.
	// Must not block.
	Changed func(hostID string)
	// Socket, when set, is called each time a host's socket opened
	// (SocketOpen) or closed (SocketClose) in any process sharing the
	// database, its own included. Must not block.
	Socket func(e SocketEvent)
	// Stopping, when set, is called with a host's id each time HostStopping
	// was called for it in any process sharing the database, its own
	// included. Must not block.
	Stopping func(hostID string)
	// IPSetChanged, when set, is called with a set's name each time
	// IPSetPut stored it in any process sharing the database, its own
	// included: what caches of sources' allowlists must drop. Must not
	// block.
	IPSetChanged func(name string)
}

// SocketEvent says that a host's socket of Epoch opened (Open) or closed.
type SocketEvent struct {
	HostID string
	Epoch  int64
	Open   bool
}

type SocketOpenResult struct {
	Epoch    int64 // the new socket's
	Replaced int64 // the open socket it takes over, in a live process; 0: none
}

type DeliveryPruneParams struct {
	Status Status // one of PrunableStatuses
	PruneParams
}

type DeliveryCountFoldParams struct {
	Limit int // 0: 1000
}

// LeaseCut returns how many lease candidates (body sizes, in FIFO order) fit
// in one batch of at most max deliveries and maxBytes of body (0: no byte
// bound). A single delivery larger than maxBytes goes alone.
func LeaseCut(sizes []int, max, maxBytes int) int {
	n, total := 0, 0
	for _, size := range sizes {
		if n >= max || (n > 0 && maxBytes > 0 && total+size > maxBytes) {
			break
		}
		total += size
		n++
	}
	return n
}
