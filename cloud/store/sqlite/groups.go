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

// The changes of a group below tell every listener (Changed with the
// group's id), as a host's changes do: intake's cached targets of the
// group hold its members.

func (s *Store) GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	return changed(s, p.GroupID)(s.Groups.GroupUpdate(ctx, p))
}

func (s *Store) GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error) {
	return changed(s, p.GroupID)(s.Groups.GroupDeactivate(ctx, p))
}

func (s *Store) GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error) {
	return changed(s, p.GroupID)(s.Groups.GroupMemberAdd(ctx, p))
}

func (s *Store) GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error) {
	return changedTo[*store.GroupMemberRemoved](s, p.GroupID)(s.Groups.GroupMemberRemove(ctx, p))
}

// changed tells every listener that group id changed, when the change it
// is handed succeeded.
func changed(s *Store, id string) func(*store.Group, error) (*store.Group, error) {
	return changedTo[*store.Group](s, id)
}

func changedTo[T any](s *Store, id string) func(T, error) (T, error) {
	return func(out T, err error) (T, error) {
		if err == nil {
			s.changed.notify(id)
		}
		return out, err
	}
}
