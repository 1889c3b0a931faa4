package store

import (
	"context"
	"time"
)

// A group of hosts has a public URL of its own, its own sources, and an
// ordered list of members. Each of its sources has a mode (GroupMode): a
// fanout source stores a delivery of each webhook for every member, an any
// source one delivery that one member at a time holds. Either way a
// group's webhook is stored as deliveries of its members (host_id the
// member that holds it, GroupID the group), so a member leases, acks and
// retries them as its own.

// GroupMode is how a group's source hands its webhooks to the members.
type GroupMode string

const (
	// GroupFanout: every member gets its own delivery of each webhook.
	GroupFanout GroupMode = "fanout"
	// GroupAny: one delivery, held by one member at a time.
	GroupAny GroupMode = "any"
)

// Valid reports whether m is a mode a group's source may have.
func (m GroupMode) Valid() bool { return m == GroupFanout || m == GroupAny }

// Group is a named list of hosts sharing sources and their URLs.
type Group struct {
	ID              string
	Name            string
	Status          HostStatus // active or deactivated, as a host's
	RateLimitPerMin int
	RateLimitBurst  int
	CreatedAt       time.Time
	DeactivatedAt   *time.Time
	Members         []GroupMember // in their order (position, then when added)
}

// MemberIDs lists the group's members' host ids in order.
func (g *Group) MemberIDs() []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.HostID
	}
	return ids
}

// GroupMember is one host of a group.
type GroupMember struct {
	HostID     string
	Position   int
	AddedAt    time.Time
	HostStatus HostStatus // the host's own: a deactivated host is handed nothing
}

// ActiveMemberIDs lists, in order, the members whose host is active: those
// a webhook of the group can go to.
func (g *Group) ActiveMemberIDs() []string {
	ids := make([]string, 0, len(g.Members))
	for _, m := range g.Members {
		if m.HostStatus == HostActive {
			ids = append(ids, m.HostID)
		}
	}
	return ids
}

type GroupCreateParams struct {
	ID              string
	Name            string
	RateLimitPerMin int
	RateLimitBurst  int
	Now             time.Time
}

// GroupUpdateParams changes the fields that are not nil.
type GroupUpdateParams struct {
	GroupID         string
	Name            *string
	RateLimitPerMin *int
	RateLimitBurst  *int
}

type GroupDeactivateParams struct {
	GroupID string
	Now     time.Time
}

// GroupMemberParams names a member of a group. Position, on add, places
// it (0: after the last).
type GroupMemberParams struct {
	GroupID  string
	HostID   string
	Position int
	Now      time.Time
}

// GroupMemberRemoved says what removing a member did to the deliveries it
// held: its fanout deliveries waiting or in flight were cancelled
// (dead-lettered with the reason, never handed out again); the any
// deliveries it held are left for the delivery core to hand to another
// member.
type GroupMemberRemoved struct {
	Group     *Group
	Cancelled int
}

// GroupMemberOf is a group a host belongs to.
type GroupMemberOf struct {
	GroupID string
	Name    string
}

// GroupRoster is a group as the delivery core routes by it: its status and
// its members with what tells whether each is online.
type GroupRoster struct {
	GroupID string
	Status  HostStatus
	Members []RosterMember // in order
}

// RosterMember is a member as the delivery core sees it.
type RosterMember struct {
	HostID          string
	Status          HostStatus // the host's own
	LastHeartbeatAt *time.Time
}

// Waiting is a group's any delivery waiting for its holder (queued or
// retrying, not leased).
type Waiting struct {
	ID     string
	HostID string // its holder
}

// DeliveryMove hands a waiting any delivery from one member to another.
type DeliveryMove struct {
	ID       string
	From, To string
	Reason   string // the audit event's
}

// DeliveryMoveParams hands over waiting any deliveries of the group
// (DeliveryMove), each only if From still holds it waiting.
type DeliveryMoveParams struct {
	GroupID string
	Moves   []DeliveryMove
	Now     time.Time
}

// GroupStore is the storage of groups.
type GroupStore interface {
	// GroupCreate inserts a group with no members. ErrConflict if the id is taken.
	GroupCreate(ctx context.Context, p *GroupCreateParams) (*Group, error)
	// GroupGet returns one group with its members, or ErrNotFound.
	GroupGet(ctx context.Context, id string) (*Group, error)
	// GroupList returns every group with its members, oldest first.
	GroupList(ctx context.Context) ([]*Group, error)
	// GroupUpdate changes a group's name and rate limits. ErrNotFound for an unknown group.
	GroupUpdate(ctx context.Context, p *GroupUpdateParams) (*Group, error)
	// GroupDeactivate marks a group deactivated (its URLs stop taking
	// webhooks; what its members hold is delivered as before).
	// ErrNotFound for an unknown group.
	GroupDeactivate(ctx context.Context, p *GroupDeactivateParams) (*Group, error)
	// GroupMemberAdd adds an active host to an active group (a member
	// already there keeps its place). ErrNotFound for an unknown or
	// deactivated group or host.
	GroupMemberAdd(ctx context.Context, p *GroupMemberParams) (*Group, error)
	// GroupMemberRemove removes a member, and cancels the fanout
	// deliveries of the group it holds that are not finished (dead-lettered,
	// audited, never handed out again). ErrNotFound when the host is no
	// member.
	GroupMemberRemove(ctx context.Context, p *GroupMemberParams) (*GroupMemberRemoved, error)
	// GroupsOfHost lists the groups a host is a member of, by id.
	GroupsOfHost(ctx context.Context, hostID string) ([]GroupMemberOf, error)
	// GroupRosters returns every group that has an any source and at
	// least one member, with its members and their presence: the active
	// ones, and the deactivated ones while any delivery of theirs waits
	// (what their members hold is delivered as before).
	GroupRosters(ctx context.Context) ([]*GroupRoster, error)
	// DeliveryGroupWaiting lists, oldest first, at most limit (0: 1000) of
	// the group's any deliveries waiting (queued or retrying) held by a
	// host not among except.
	DeliveryGroupWaiting(ctx context.Context, groupID string, except []string, limit int) ([]Waiting, error)
	// DeliveryGroupHolders counts the group's any deliveries waiting
	// (queued or retrying), by the host that holds them.
	DeliveryGroupHolders(ctx context.Context, groupID string) (map[string]int, error)
	// DeliveryMove hands waiting any deliveries to other members, each
	// with an audit event, and wakes the new holders. Returns how many moved.
	DeliveryMove(ctx context.Context, p *DeliveryMoveParams) (int, error)
}
