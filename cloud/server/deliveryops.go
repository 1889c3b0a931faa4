package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// RetryDelivery puts one of a host's dead-lettered or retrying deliveries
// back in the queue with its attempts reset, for the host's next
// heartbeat, as POST /api/hosts/:id/webhooks/:deliveryId/retry does.
// Errors are the API's: not found, or a conflict naming the status.
func (s *Server) RetryDelivery(ctx context.Context, hostID, id string) (*store.Delivery, error) {
	d, err := s.store.DeliveryRetry(ctx, &store.DeliveryRetryParams{HostID: hostID, ID: id, Now: s.now()})
	var te *store.TransitionError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, shared.NotFound("no such delivery on this host")
	case errors.As(err, &te):
		return nil, &shared.Error{Code: shared.CodeConflict, Message: fmt.Sprintf(
			"delivery is %s: only a dead-lettered (dlq) or retrying delivery can be retried", te.Status)}
	case err != nil:
		return nil, err
	}
	s.log.Info("delivery retried", "host", d.HostID, "delivery_id", d.ID)
	return d, nil
}

// PurgeDLQ deletes a host's dead letters and their audit trails, in
// bounded batches, as DELETE /api/hosts/:id/webhooks/dlq does. Returns
// how many; not found for an unknown host.
func (s *Server) PurgeDLQ(ctx context.Context, hostID string) (int, error) {
	if _, err := s.store.HostGet(ctx, hostID); err != nil {
		return 0, hostErr(err)
	}
	const batch = 1000
	total := 0
	for {
		n, err := s.store.DeliveryPurgeDLQ(ctx, &store.DeliveryPurgeDLQParams{HostID: hostID, Limit: batch})
		total += n
		if err != nil {
			return total, err
		}
		if n < batch {
			break
		}
	}
	s.log.Info("dead letters purged", "host", hostID, "count", total)
	return total, nil
}
