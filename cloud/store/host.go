package store

import (
	"encoding/json"
	"time"
)

// HostStatus is a host's lifecycle state.
type HostStatus string

const (
	HostActive      HostStatus = "active"
	HostDeactivated HostStatus = "deactivated"
)

// Host is a machine that receives deliveries.
type Host struct {
	ID              string
	Name            string
	Status          HostStatus
	Generation      int64  // bumped on claim and deactivate; tokens carry it
	CredentialHash  []byte // sha256 of the host credential; nil until claimed
	ClaimCodeHash   []byte // sha256 of the pending claim code; nil when none
	ClaimExpiresAt  *time.Time
	ClaimedAt       *time.Time
	AgentVersion    string
	LastHeartbeatAt *time.Time
	Subscription    json.RawMessage // the host's last reported shared.Subscription; nil if none
	RateLimitPerMin int
	RateLimitBurst  int
	CreatedAt       time.Time
	DeactivatedAt   *time.Time
}

// HostWithCounts is a host with its deliveries counted by status.
type HostWithCounts struct {
	Host   *Host
	Counts map[Status]int
}

// HostPageParams is a page of the hosts, oldest first.
type HostPageParams struct {
	Limit int // 0: every host
	// Keyset cursor: hosts created strictly after (AfterCreatedAt, AfterID).
	AfterCreatedAt *time.Time
	AfterID        string
	// Presence, when set, keeps the active, claimed hosts of that presence
	// by their last contact (else their claim): at or after LateCut
	// online, before it and at or after OfflineCut late, before
	// OfflineCut offline.
	Presence   Presence
	LateCut    time.Time
	OfflineCut time.Time
}

// HostUpdateParams changes the fields that are not nil.
type HostUpdateParams struct {
	HostID          string
	Name            *string
	RateLimitPerMin *int
	RateLimitBurst  *int
}

type HostExpireClaimCodesParams struct {
	Limit int
	Now   time.Time
}

type HostCreateParams struct {
	ID              string
	Name            string
	ClaimCodeHash   []byte
	ClaimExpiresAt  time.Time
	RateLimitPerMin int
	RateLimitBurst  int
	Now             time.Time
}

type HostClaimParams struct {
	ClaimCodeHash  []byte
	CredentialHash []byte
	AgentVersion   string
	Now            time.Time
}

type HostSetClaimCodeParams struct {
	HostID         string
	ClaimCodeHash  []byte
	ClaimExpiresAt time.Time
}

type HostHeartbeatParams struct {
	HostID       string
	AgentVersion string
	Subscription json.RawMessage // nil: unchanged
	Now          time.Time
}

type HostDeactivateParams struct {
	HostID string
	Now    time.Time
}
