package store

import (
	"context"
	"time"
)

// Presence is how a host stands with the cloud, from its last contact.
type Presence string

const (
	PresenceOnline  Presence = "online"
	PresenceLate    Presence = "late"    // missed its expected contact by a margin
	PresenceOffline Presence = "offline" // not heard from for longer
)

// AlertStore is what host presence and alerting keep: each host's recorded
// presence and its history, the durable state of alerts, their rules'
// per-host settings, the sinks notifications go to and the outbox that
// holds each notification until its sink took it. Every query that scans
// hosts or deliveries is bounded by a Limit.
type AlertStore interface {
	// LeaseAcquire takes the named lease for Holder until Until when it is
	// free (it expired at or before Now, or never was taken) or already
	// Holder's, and reports whether Holder holds it now. Replicas sharing a
	// database use it to pick the one that runs a job.
	LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) (bool, error)
	// LeaseRelease gives up the named lease if Holder holds it.
	LeaseRelease(ctx context.Context, name, holder string) error
	// LeasesHeld counts, in one query, the leases whose name starts with
	// prefix and that have not expired at now.
	LeasesHeld(ctx context.Context, prefix string, now time.Time) (int, error)

	// PresenceChanges returns active, claimed hosts whose recorded presence
	// is not the one their last contact gives (online at or after LateBefore,
	// late at or after OfflineBefore, else offline; a host never heard from
	// counts from its claim), at most Limit of them (0: 1000), in one query.
	PresenceChanges(ctx context.Context, p *PresenceChangesParams) ([]*PresenceChange, error)
	// PresenceSet records, in one transaction, each of Changes: its host's
	// presence To since Now, if its recorded presence is still From ("":
	// none), with an event saying how long the previous one lasted. A host
	// changes once a call (its first change that applies); a host that is
	// not stored is skipped. Reports, change by change, whether it was
	// made. Its statements do not grow with the changes (a fleet going
	// offline at once is one transaction of a few statements).
	PresenceSet(ctx context.Context, p *PresenceSetParams) ([]bool, error)
	// PresenceList returns active hosts recorded in State, longest first, at
	// most Limit (0: 1000).
	PresenceList(ctx context.Context, p *PresenceListParams) ([]*PresenceChange, error)
	// PresenceCounts counts active hosts by recorded presence, in one
	// query.
	PresenceCounts(ctx context.Context) (map[Presence]int, error)
	// PresenceEventList returns a host's presence history, newest first, at
	// most limit (0: 100).
	PresenceEventList(ctx context.Context, hostID string, limit int) ([]*PresenceEvent, error)

	// BacklogByHost returns, in one query, the hosts with deliveries waiting
	// (queued, delivering, delivered or retrying) or dead-lettered: their
	// counts and the oldest waiting delivery's receipt, hosts with the
	// oldest waiting delivery first, at most Limit hosts (0: 1000), of
	// HostIDs only when it is not nil.
	BacklogByHost(ctx context.Context, p *BacklogParams) ([]*HostBacklog, error)
	// FailingSources returns, in one query, each host and source whose
	// retrying deliveries failed at least MinAttempts attempts in a row (the
	// most any of them failed), most first, at most Limit (0: 1000).
	FailingSources(ctx context.Context, p *FailingSourcesParams) ([]*SourceFailures, error)

	// AlertFire records, in one transaction, a firing alert for the Rule
	// and Key of each of ps that has none firing, and queues its Payload
	// for every sink. It returns, for each of ps, the alert it fired (nil:
	// one was firing already). Its statements do not grow with ps one by
	// one (a fleet's alerts firing at once are a few statements).
	AlertFire(ctx context.Context, ps []*AlertFireParams) ([]*Alert, error)
	// HostNames returns the names of the hosts among ids that are stored,
	// by id, in one query.
	HostNames(ctx context.Context, ids []string) (map[string]string, error)
	// AlertRemind, for each of ps whose alert is firing and was last sent
	// at its LastSentAt, queues its Payload for every sink and moves the
	// alert's last_sent_at to its Now, all in one transaction. Reports,
	// for each of ps, whether it did.
	AlertRemind(ctx context.Context, ps []*AlertNoticeParams) ([]bool, error)
	// AlertResolve marks each of ps's alerts that is firing resolved at
	// its Now and queues its Payload for every sink, all in one
	// transaction. Reports, for each of ps, whether it did (false:
	// resolved already).
	AlertResolve(ctx context.Context, ps []*AlertNoticeParams) ([]bool, error)
	// AlertList returns alerts, newest first, firing ones only when Firing,
	// before the cursor id if one is given, at most Limit (0: 100).
	AlertList(ctx context.Context, p *AlertListParams) ([]*Alert, error)

	// AlertRuleSet creates or replaces a rule's setting for a host ("":
	// every host).
	AlertRuleSet(ctx context.Context, r *AlertRuleSetting) error
	// AlertRuleDelete removes a rule's setting for a host (a no-op if none).
	AlertRuleDelete(ctx context.Context, hostID, rule string) error
	// AlertRuleList returns every rule setting, by host and rule, at most
	// 10,000.
	AlertRuleList(ctx context.Context) ([]*AlertRuleSetting, error)

	// AlertSinkCreate adds a sink. ErrConflict if the id is taken.
	AlertSinkCreate(ctx context.Context, s *AlertSink) error
	// AlertSinkList returns every sink, oldest first, each with the
	// notifications it has not taken yet.
	AlertSinkList(ctx context.Context) ([]*AlertSink, error)
	// AlertSinkReseal replaces a sink's sealed URL and secret (cloud
	// rekey). ErrNotFound for an unknown sink.
	AlertSinkReseal(ctx context.Context, p *AlertSinkResealParams) error
	// AlertSinkDelete removes a sink and its queued notifications.
	// ErrNotFound for an unknown sink.
	AlertSinkDelete(ctx context.Context, id string) error

	// AlertOutboxDue returns the head of each sink's queue (its oldest
	// queued notification) when it is due at Now, oldest first, at most
	// Limit (0: 100), each with its sink: a sink gets its notifications in
	// order, one after the other.
	AlertOutboxDue(ctx context.Context, p *AlertOutboxDueParams) ([]*AlertNotification, error)
	// AlertOutboxSent deletes a notification its sink took, and counts it
	// on the sink (clearing its failures).
	AlertOutboxSent(ctx context.Context, p *AlertOutboxSentParams) error
	// AlertOutboxFailed counts a failed attempt of a notification, due
	// again at NextAt, and records the error on its sink.
	AlertOutboxFailed(ctx context.Context, p *AlertOutboxFailedParams) error

	// Intake5xxAdd adds N to Replica's count of intake 5xx answers in the
	// minute of Now, and first deletes every replica's minutes before
	// PruneBefore. Nothing is added if it fails.
	Intake5xxAdd(ctx context.Context, p *Intake5xxAddParams) error
	// Intake5xxSum sums, in one query, every replica's counts of intake
	// 5xx answers in the minutes that start at or after Since.
	Intake5xxSum(ctx context.Context, p *Intake5xxSumParams) (int64, error)
}

type LeaseAcquireParams struct {
	Name   string
	Holder string
	Until  time.Time
	Now    time.Time
}

type PresenceChangesParams struct {
	LateBefore    time.Time // contact before this: late
	OfflineBefore time.Time // contact before this: offline
	Limit         int
}

// PresenceChange is a host's last contact and recorded presence.
type PresenceChange struct {
	HostID      string
	LastContact *time.Time // last heartbeat; nil: never
	ClaimedAt   *time.Time
	State       Presence // recorded; "" none
	Since       *time.Time
}

type PresenceSetParams struct {
	Changes []PresenceMove
	Now     time.Time
}

// PresenceMove is one host's presence going From one To another.
type PresenceMove struct {
	HostID string
	From   Presence // "": none recorded
	To     Presence
}

type PresenceListParams struct {
	State Presence
	Limit int
}

// PresenceEvent is one change of a host's presence.
type PresenceEvent struct {
	ID     int64
	HostID string
	At     time.Time
	From   Presence // "" for the first
	To     Presence
	Lasted time.Duration // how long From lasted
}

type BacklogParams struct {
	DLQSince time.Time // dead letters counted in NewDLQ: dead-lettered at or after this
	Limit    int
	HostIDs  []string // only these hosts; nil: every host
}

// HostBacklog is one host's waiting and dead-lettered deliveries.
type HostBacklog struct {
	HostID        string
	Pending       int        // queued, delivering, delivered or retrying
	OldestPending *time.Time // receipt of the oldest of them; nil: none
	DLQ           int        // dead-lettered
	NewDLQ        int        // dead-lettered at or after DLQSince
}

type FailingSourcesParams struct {
	MinAttempts int
	Limit       int
}

// SourceFailures is a host's source whose deliveries keep failing.
type SourceFailures struct {
	HostID   string
	Source   string
	Attempts int // the most failed attempts of one retrying delivery
	Retrying int // its retrying deliveries
}

// Alert is one episode of a rule's condition on a key.
type Alert struct {
	ID         int64
	Rule       string
	Key        string // what it is about: "host:h_…", "host:h_…/github", "cloud"
	HostID     string
	Source     string
	Summary    string
	StartedAt  time.Time
	LastSentAt time.Time
	ResolvedAt *time.Time
}

type AlertFireParams struct {
	Rule    string
	Key     string
	HostID  string
	Source  string
	Summary string
	// Payload builds the notification queued for every sink, from the
	// stored alert (its id known).
	Payload func(a *Alert) ([]byte, error)
	Now     time.Time
}

type AlertNoticeParams struct {
	ID         int64
	LastSentAt time.Time // AlertRemind: what the caller saw
	Payload    []byte
	Now        time.Time
}

type AlertListParams struct {
	Firing   bool
	BeforeID int64
	Limit    int
}

// AlertRuleSetting overrides a built-in rule for a host ("": every host).
type AlertRuleSetting struct {
	HostID    string
	Rule      string
	Disabled  bool
	Threshold int64 // the rule's own unit (milliseconds, or a count); 0: the default
}

// AlertSink is where notifications go. URL and Secret are sealed by the
// key ring; Target is what may be shown of the URL.
type AlertSink struct {
	ID           string
	Kind         string // "webhook" or "slack"
	Target       string
	URLSealed    string
	SecretSealed string
	CreatedAt    time.Time
	Sent         int64
	Failures     int64 // failed attempts since the last success
	FailingSince *time.Time
	LastError    string
	LastErrorAt  *time.Time
	Queued       int // notifications not taken yet (AlertSinkList)
}

type AlertSinkResealParams struct {
	ID           string
	URLSealed    string
	SecretSealed string
}

type AlertOutboxDueParams struct {
	Now   time.Time
	Limit int
}

// AlertNotification is one queued notification for one sink.
type AlertNotification struct {
	ID        int64
	AlertID   int64
	Sink      *AlertSink
	Payload   []byte
	CreatedAt time.Time
	Attempts  int
}

type AlertOutboxSentParams struct {
	ID     int64
	SinkID string
	Now    time.Time
}

type AlertOutboxFailedParams struct {
	ID     int64
	SinkID string
	Error  string // cut to 500 bytes
	NextAt time.Time
	Now    time.Time
}

type Intake5xxAddParams struct {
	Replica     string
	N           int64
	Now         time.Time // counted in its minute
	PruneBefore time.Time
}

type Intake5xxSumParams struct {
	Since time.Time // the minutes starting at or after it
}

// MinuteOf is the start of t's minute: a bucket of Intake5xxAdd.
func MinuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// Millis is n milliseconds.
func Millis(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// CutError bounds an error message kept in the store.
func CutError(s string) string {
	if len(s) > 500 {
		return s[:500]
	}
	return s
}
