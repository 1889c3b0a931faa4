package postgres

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// The rest of store.GroupStore is flow.Groups, which Store embeds.

// DeliveryMove hands the deliveries over (flow.Groups.Move) and, once
// committed, wakes their new holders' listeners in every process.
func (s *Store) DeliveryMove(ctx context.Context, p *store.DeliveryMoveParams) (int, error) {
	n, hosts, err := s.Groups.Move(ctx, p)
	if err != nil {
		return 0, err
	}
	for _, h := range hosts {
		if err := notifyAvailable(ctx, s.pool, h); err != nil {
			return n, fmt.Errorf("delivery move: %w", err)
		}
	}
	return n, nil
}

// A group's changes — created, renamed, its limits, deactivated, a member
// added or removed — are told to every listener once committed
// (store.DeliveryListenParams.Changed, with the group's id), as a host's
// are: what caches of the group must drop.

func (s *Store) GroupCreate(ctx context.Context, p *store.GroupCreateParams) (*store.Group, error) {
	g, err := s.Groups.GroupCreate(ctx, p)
	return g, s.groupChanged(ctx, p.ID, err)
}

func (s *Store) GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	g, err := s.Groups.GroupUpdate(ctx, p)
	return g, s.groupChanged(ctx, p.GroupID, err)
}

func (s *Store) GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error) {
	g, err := s.Groups.GroupDeactivate(ctx, p)
	return g, s.groupChanged(ctx, p.GroupID, err)
}

func (s *Store) GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error) {
	g, err := s.Groups.GroupMemberAdd(ctx, p)
	return g, s.groupChanged(ctx, p.GroupID, err)
}

func (s *Store) GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error) {
	out, err := s.Groups.GroupMemberRemove(ctx, p)
	return out, s.groupChanged(ctx, p.GroupID, err)
}

// groupChanged tells listeners that group id changed, unless err says it
// did not; it returns err, or the failure to tell.
func (s *Store) groupChanged(ctx context.Context, id string, err error) error {
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, changedChannel, id); err != nil {
		return fmt.Errorf("group changed: %w", err)
	}
	return nil
}
