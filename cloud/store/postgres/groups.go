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

// The changes of a group below tell every listener (Changed with the
// group's id) once committed, as a host's changes do: intake's cached
// targets of the group hold its members.

func (s *Store) GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	return changed(ctx, s, p.GroupID, func() (*store.Group, error) { return s.Groups.GroupUpdate(ctx, p) })
}

func (s *Store) GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error) {
	return changed(ctx, s, p.GroupID, func() (*store.Group, error) { return s.Groups.GroupDeactivate(ctx, p) })
}

func (s *Store) GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error) {
	return changed(ctx, s, p.GroupID, func() (*store.Group, error) { return s.Groups.GroupMemberAdd(ctx, p) })
}

func (s *Store) GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error) {
	return changed(ctx, s, p.GroupID, func() (*store.GroupMemberRemoved, error) { return s.Groups.GroupMemberRemove(ctx, p) })
}

// changed runs change and, when it succeeded, tells every listener that
// id changed.
func changed[T any](ctx context.Context, s *Store, id string, change func() (T, error)) (T, error) {
	out, err := change()
	if err != nil {
		return out, err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, changedChannel, id); err != nil {
		return out, fmt.Errorf("group changed: %w", err)
	}
	return out, nil
}
