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
