// Package alert tells someone when something is wrong: it derives each
// host's presence from its last contact, evaluates the built-in rules once
// an interval on the one replica that holds the evaluator's lease, keeps
// their state in the store (fire once, re-send while it lasts, resolve with
// a notice) and sends each notification to every sink from a durable
// outbox, retrying a sink that is down.
package alert

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// PresenceConfig says when a host stops being online.
type PresenceConfig struct {
	LateAfter    time.Duration // no contact for this long: late (default 1 min)
	OfflineAfter time.Duration // no contact for this long: offline (default 3 min)
}

func (c *PresenceConfig) setDefaults() {
	if c.LateAfter <= 0 {
		c.LateAfter = time.Minute
	}
	if c.OfflineAfter <= 0 {
		c.OfflineAfter = 3 * time.Minute
	}
}

// Cuts are the times that divide presence at now: a host last heard from
// at or after late is online, before it and at or after offline late,
// before offline offline (what a store's presence filter takes).
func (c PresenceConfig) Cuts(now time.Time) (late, offline time.Time) {
	c.setDefaults()
	return now.Add(-c.LateAfter), now.Add(-c.OfflineAfter)
}

// Of is the presence of a host last heard from at last (nil: never; then
// from is when it was claimed) at now.
func (c PresenceConfig) Of(last, claimed *time.Time, now time.Time) store.Presence {
	at := last
	if at == nil {
		at = claimed
	}
	late, offline := c.Cuts(now)
	switch {
	case at == nil:
		return store.PresenceOffline
	case !at.Before(late):
		return store.PresenceOnline
	case !at.Before(offline):
		return store.PresenceLate
	}
	return store.PresenceOffline
}

// The built-in rules.
const (
	RuleOfflineWithWork  = "host_offline_with_work"
	RuleOffline          = "host_offline"
	RuleOldestPending    = "oldest_pending"
	RuleDeadLetters      = "dead_letters"
	RuleRepeatedFailures = "repeated_failures"
	RuleQuarantine       = "quarantine_not_empty"
	RuleSecretKeys       = "secret_keys"
	RuleIntake5xx        = "intake_5xx"
	RuleGroupOffline     = "group_offline_with_work"
)

// Unit is what a rule's threshold counts.
type Unit string

const (
	UnitDuration Unit = "ms" // stored in milliseconds, shown as after_s
	UnitCount    Unit = "count"
	UnitNone     Unit = ""
)

// Rule is one built-in rule.
type Rule struct {
	Name    string
	Help    string
	Unit    Unit
	Default int64 // threshold, in Unit
	PerHost bool  // evaluated per host (and so overridable per host)
}

// Rules lists the built-in rules and their defaults.
var Rules = []Rule{
	{RuleOfflineWithWork, "a host is offline for at least the threshold while webhooks wait for it", UnitDuration, 0, true},
	{RuleOffline, "a host is offline for longer than the threshold, even with nothing waiting", UnitDuration, int64(time.Hour / time.Millisecond), true},
	{RuleOldestPending, "a host's oldest waiting webhook is older than the threshold", UnitDuration, int64(15 * time.Minute / time.Millisecond), true},
	{RuleDeadLetters, "webhooks were dead-lettered for a host within the threshold", UnitDuration, int64(time.Hour / time.Millisecond), true},
	{RuleRepeatedFailures, "a webhook of a host's source failed at least the threshold's attempts in a row", UnitCount, 3, true},
	{RuleQuarantine, "intake requests wait in the quarantine for a key that opens their secret", UnitNone, 0, false},
	{RuleSecretKeys, "no configured secret key opens the stored secrets' canary", UnitNone, 0, false},
	{RuleIntake5xx, "intake answered at least the threshold of 5xx within the last minute (or interval, if longer), over every replica", UnitCount, 1, false},
	{RuleGroupOffline, "every member of a group is offline for at least the threshold while its any sources' webhooks wait", UnitDuration, 0, false},
}

// RuleNamed returns the rule of that name.
func RuleNamed(name string) (Rule, bool) {
	for _, r := range Rules {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

// settings resolves each rule's threshold for a host: its own setting,
// else every host's, else the rule's default.
type settings struct {
	all    map[string]*store.AlertRuleSetting
	byHost map[string]map[string]*store.AlertRuleSetting
}

func newSettings(list []*store.AlertRuleSetting) *settings {
	s := &settings{all: map[string]*store.AlertRuleSetting{}, byHost: map[string]map[string]*store.AlertRuleSetting{}}
	for _, r := range list {
		if r.HostID == "" {
			s.all[r.Rule] = r
			continue
		}
		if s.byHost[r.HostID] == nil {
			s.byHost[r.HostID] = map[string]*store.AlertRuleSetting{}
		}
		s.byHost[r.HostID][r.Rule] = r
	}
	return s
}

// of returns the rule's threshold for hostID ("": the cloud-wide rules)
// and whether the rule is on for it.
func (s *settings) of(rule Rule, hostID string) (int64, bool) {
	t, on := rule.Default, true
	for _, set := range []*store.AlertRuleSetting{s.all[rule.Name], s.byHost[hostID][rule.Name]} {
		if set == nil {
			continue
		}
		on = !set.Disabled
		if set.Threshold > 0 {
			t = set.Threshold
		}
	}
	return t, on
}

// min is the lowest threshold of the rule over every host that has it on.
func (s *settings) min(rule Rule) int64 {
	m, _ := s.of(rule, "")
	for _, sets := range s.byHost {
		if set := sets[rule.Name]; set != nil && !set.Disabled && set.Threshold > 0 {
			m = min(m, set.Threshold)
		}
	}
	return m
}

// max is the highest threshold of the rule over every host.
func (s *settings) max(rule Rule) int64 {
	m, _ := s.of(rule, "")
	for _, sets := range s.byHost {
		if set := sets[rule.Name]; set != nil && set.Threshold > 0 {
			m = max(m, set.Threshold)
		}
	}
	return m
}
