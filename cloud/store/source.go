package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// Source is one configured webhook source of a host, e.g. "github".
type Source struct {
	HostID       string
	Name         string
	Provider     string
	Enabled      bool
	Events       []string // empty: every event
	Secrets      []SealedSecret
	Options      map[string]string
	MaxBodyBytes int64 // 0: the provider's default
	// AllowedIPs lists the addresses a webhook may come from: CIDRs,
	// single IPs and names of IP sets. Empty: any address.
	AllowedIPs []string
	// RetryDelays is the source's retry schedule: RetryDelays[i] is the wait
	// before attempt i+1 (the first entry, the first attempt, is 0). nil: the
	// default policy.
	RetryDelays []time.Duration
	// MaxAttempts dead-letters a delivery after this many failed attempts.
	// 0: len(RetryDelays), or the default policy's when RetryDelays is nil.
	MaxAttempts int
	// Mode is how a group's source hands its webhooks to the group's
	// members; "" for a host's source.
	Mode      GroupMode
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SealedSecret is a source secret encrypted at rest, with a fingerprint that
// may be shown (it reveals nothing usable).
type SealedSecret struct {
	Ciphertext  string `json:"ciphertext"`
	Fingerprint string `json:"fingerprint"`
}

type SourceUpsertParams struct {
	HostID       string
	Name         string
	Provider     string
	Enabled      bool
	Events       []string
	Secrets      []SealedSecret
	Options      map[string]string
	MaxBodyBytes int64
	AllowedIPs   []string        // empty: any address
	RetryDelays  []time.Duration // nil: the default policy
	MaxAttempts  int             // 0: len(RetryDelays), or the default policy's
	Mode         GroupMode       // a group's source only (HostID is the group's id)
	Now          time.Time
}

// JSONFields encodes a source's list and map fields as stored, nil as empty.
func (p *SourceUpsertParams) JSONFields() (events, secrets, options []byte, err error) {
	ev, sec, opt := p.Events, p.Secrets, p.Options
	if ev == nil {
		ev = []string{}
	}
	if sec == nil {
		sec = []SealedSecret{}
	}
	if opt == nil {
		opt = map[string]string{}
	}
	if events, err = json.Marshal(ev); err != nil {
		return nil, nil, nil, err
	}
	if secrets, err = json.Marshal(sec); err != nil {
		return nil, nil, nil, err
	}
	if options, err = json.Marshal(opt); err != nil {
		return nil, nil, nil, err
	}
	return events, secrets, options, nil
}

// AllowedIPsJSON encodes a source's allowlist as stored, nil as empty.
func (p *SourceUpsertParams) AllowedIPsJSON() string {
	if len(p.AllowedIPs) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(p.AllowedIPs) // strings always encode
	return string(b)
}

// SetJSONFields reads a source's list and map fields as stored (what
// JSONFields and AllowedIPsJSON write); an empty allowlist is nil.
func (src *Source) SetJSONFields(events, secrets, options, allowedIPs []byte) error {
	if err := json.Unmarshal(events, &src.Events); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if err := json.Unmarshal(secrets, &src.Secrets); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := json.Unmarshal(options, &src.Options); err != nil {
		return fmt.Errorf("options: %w", err)
	}
	if err := json.Unmarshal(allowedIPs, &src.AllowedIPs); err != nil {
		return fmt.Errorf("allowed_ips: %w", err)
	}
	if len(src.AllowedIPs) == 0 {
		src.AllowedIPs = nil
	}
	return nil
}
