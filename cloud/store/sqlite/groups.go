package sqlite

import (
	"context"

	"github.com/relaykit/relay/cloud/store"
)

// The rest of store.GroupStore is flow.Groups, which Store embeds.

// DeliveryMove hands the deliveries over (flow.Groups.Move) and, once
// committed, wakes their new holders' listeners.
func (s *Store) DeliveryMove(ctx context.Context, p *store.DeliveryMoveParams) (int, error) {
	n, hosts, err := s.Groups.Move(ctx, p)
	for _, h := range hosts {
		s.wake.notify(h)
	}
	return n, err
}

// A group's changes — created, renamed, its limits, deactivated, a member
// added or removed — are told to listeners (store.DeliveryListenParams.
// Changed, with the group's id), as a host's are: what caches of the
// group must drop.

func (s *Store) GroupCreate(ctx context.Context, p *store.GroupCreateParams) (*store.Group, error) {
	g, err := s.Groups.GroupCreate(ctx, p)
	return g, s.groupChanged(p.ID, err)
}

func (s *Store) GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	g, err := s.Groups.GroupUpdate(ctx, p)
	return g, s.groupChanged(p.GroupID, err)
}

func (s *Store) GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error) {
	g, err := s.Groups.GroupDeactivate(ctx, p)
	return g, s.groupChanged(p.GroupID, err)
}

func (s *Store) GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error) {
	g, err := s.Groups.GroupMemberAdd(ctx, p)
	return g, s.groupChanged(p.GroupID, err)
}

func (s *Store) GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error) {
	out, err := s.Groups.GroupMemberRemove(ctx, p)
	return out, s.groupChanged(p.GroupID, err)
}

// groupChanged tells listeners that group id changed, unless err says it
// did not; it returns err.
func (s *Store) groupChanged(id string, err error) error {
	if err == nil {
		s.changed.notify(id)
	}
	return err
}
