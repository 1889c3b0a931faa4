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
