package shared

import (
	"fmt"
	"time"
)

// The admin API's answers that both the cloud and `cloud ctl` read: the
// cloud writes them, ctl decodes them and prints them (--json as they are).

// Source is a host's source as the admin API shows it: never its secrets,
// only their fingerprints.
type Source struct {
	Name               string            `json:"name"`
	Provider           string            `json:"provider"`
	Enabled            bool              `json:"enabled"`
	Events             []string          `json:"events"`
	SecretFingerprints []string          `json:"secret_fingerprints"`
	Options            map[string]string `json:"options"`
	MaxBodyBytes       int64             `json:"max_body_bytes"`
	RetrySchedule      []float64         `json:"retry_schedule_s"`
	MaxAttempts        int               `json:"max_attempts"`
	// AllowedIPs lists the addresses the source takes webhooks from:
	// CIDRs, single IPs, names of IP sets. Empty: any address.
	AllowedIPs []string `json:"allowed_ips"`
	// Mode is how a group's source hands its webhooks to the group's
	// members: "fanout" (each member its own delivery) or "any" (one
	// delivery, one member at a time). Absent for a host's source.
	Mode       string    `json:"mode,omitempty"`
	WebhookURL string    `json:"webhook_url"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Group is a group of hosts as the admin API shows it: a URL of its own
// (WebhookURL, with the source's name for {source}) and its members in
// order.
type Group struct {
	ID              string        `json:"id"`
	Name            string        `json:"name"`
	Status          string        `json:"status"` // active or deactivated
	RateLimitPerMin int           `json:"rate_limit_per_min"`
	RateLimitBurst  int           `json:"rate_limit_burst"`
	CreatedAt       time.Time     `json:"created_at"`
	DeactivatedAt   *time.Time    `json:"deactivated_at,omitempty"`
	WebhookURL      string        `json:"webhook_url"`
	Members         []GroupMember `json:"members"`
}

// GroupDetail is one group with its sources (GET /api/groups/:id).
type GroupDetail struct {
	Group
	Sources []Source `json:"sources"`
}

// GroupMember is a host of a group, with what the host list says of it.
type GroupMember struct {
	HostID   string `json:"host_id"`
	Name     string `json:"name"`
	Status   string `json:"status"` // the host's: active or deactivated
	Claimed  bool   `json:"claimed"`
	Presence string `json:"presence,omitempty"` // online, late or offline for an active, claimed host
	// LastHeartbeatAt is the host's last contact.
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	Position        int        `json:"position"`
	AddedAt         time.Time  `json:"added_at"`
}

// CreateGroupRequest creates a group (POST /api/groups). Rate limits of 0
// are the cloud's defaults.
type CreateGroupRequest struct {
	Name            string `json:"name"`
	RateLimitPerMin int    `json:"rate_limit_per_min,omitempty"`
	RateLimitBurst  int    `json:"rate_limit_burst,omitempty"`
}

// GroupMemberRequest adds a host to a group (PUT
// /api/groups/:id/members/:hostId). Position places it (absent or 0: after
// the last); a member already there keeps its place.
type GroupMemberRequest struct {
	Position int `json:"position,omitempty"`
}

// GroupMemberRemoved answers DELETE /api/groups/:id/members/:hostId: the
// group, and how many of the group's fanout deliveries the host held
// unfinished were cancelled (dead-lettered).
type GroupMemberRemoved struct {
	Group     Group `json:"group"`
	Cancelled int   `json:"cancelled"`
}

// Delivery is a delivery as the admin API shows it. Headers and RawBody are
// set only in the one-delivery answer.
type Delivery struct {
	DeliveryID    string            `json:"delivery_id"`
	ReplayOf      string            `json:"replay_of,omitempty"` // a replay's original (X-Relay-Replay-Of)
	HostID        string            `json:"host_id"`
	Source        string            `json:"source"`
	EventID       string            `json:"event_id"`
	EventType     string            `json:"event_type"`
	EventAction   string            `json:"event_action"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	NextRetryAt   *time.Time        `json:"next_retry_at"`
	LeaseExpires  *time.Time        `json:"lease_expires_at"`
	LastError     string            `json:"last_error"`
	ReceivedAt    time.Time         `json:"received_at"`
	DeliveredAt   *time.Time        `json:"delivered_at"`
	AckedAt       *time.Time        `json:"acked_at"`
	DLQAt         *time.Time        `json:"dlq_at"`
	CorrelationID string            `json:"correlation_id"`
	BodySize      int               `json:"body_size"`
	Headers       map[string]string `json:"headers,omitempty"`
	RawBody       []byte            `json:"raw_body,omitempty"`
}

// HostResult is what a host's ledger recorded of a delivery's last handler
// run, as the host reported it.
type HostResult struct {
	Attempt        int       `json:"attempt"`
	Result         string    `json:"result"`
	Handler        string    `json:"handler"`
	ResponseStatus *int      `json:"response_status"`
	ExitCode       *int      `json:"exit_code"`
	DurationMS     int64     `json:"duration_ms"`
	Error          string    `json:"error"`
	ReportedAt     time.Time `json:"reported_at"`
}

// NextAction is what an operator can do about a delivery, and why: the
// cloud decides it (delivery.Advise) for the admin API's delivery, `cloud
// ctl inspect` and the console.
type NextAction struct {
	// RetrySafe says whether running the handler again is safe: false when
	// the host's ledger records the side effect as done.
	RetrySafe bool   `json:"retry_safe"`
	Action    string `json:"action"` // none, wait, retry, replay, ack, investigate
	Why       string `json:"why"`
}

func (a NextAction) String() string {
	if a.Action == "none" {
		return "none: " + a.Why
	}
	safe := "retry-safe"
	if !a.RetrySafe {
		safe = "NOT retry-safe"
	}
	return fmt.Sprintf("%s (%s): %s", a.Action, safe, a.Why)
}

// Alert is an alert as the admin API shows it.
type Alert struct {
	ID         int64      `json:"id"`
	Rule       string     `json:"rule"`
	Key        string     `json:"key"`
	HostID     string     `json:"host_id,omitempty"`
	Source     string     `json:"source,omitempty"`
	Summary    string     `json:"summary"`
	State      string     `json:"state"` // firing or resolved
	StartedAt  time.Time  `json:"started_at"`
	LastSentAt time.Time  `json:"last_sent_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// AlertSink is a sink as the admin API shows it: never its URL (a Slack
// URL is a credential) or its secret, which is answered once, on creation.
type AlertSink struct {
	ID           string     `json:"id"`
	Kind         string     `json:"kind"`
	Target       string     `json:"target"`
	CreatedAt    time.Time  `json:"created_at"`
	Sent         int64      `json:"sent"`
	Queued       int        `json:"queued"`
	Failures     int64      `json:"failures"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	LastErrorAt  *time.Time `json:"last_error_at,omitempty"`
	Secret       string     `json:"secret,omitempty"`
}

// How the admin API's prose and `cloud ctl` say times and missing values
// to a person, the same everywhere.

// Since is t relative to now, to the second: "41s ago", "in 1m0s", "now".
func Since(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < 0:
		return "in " + (-d).String()
	case d == 0:
		return "now"
	}
	return d.String() + " ago"
}

// Stamp is t in RFC 3339, UTC; "-" for none.
func Stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// OrDash is s, or "-" when it is empty.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// IPSet is a named set of sender addresses (GET /api/ipsets): a
// provider's published webhook ranges, as shipped or last refreshed.
type IPSet struct {
	Name        string     `json:"name"`
	URL         string     `json:"url"`    // where the provider publishes it
	Size        int        `json:"size"`   // prefixes in force
	Origin      string     `json:"origin"` // "shipped", "file" or the URL refreshed from
	TakenAt     *time.Time `json:"taken_at"`
	RefreshedAt *time.Time `json:"refreshed_at"` // null: never refreshed (the shipped list, if any, is in force)
	CheckedAt   *time.Time `json:"checked_at"`   // the last refresh attempt
	LastError   string     `json:"last_error"`   // why the last attempt failed; "" when it did not
	Prefixes    []string   `json:"prefixes"`
}
