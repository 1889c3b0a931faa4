-- +goose Up
-- Every host's dead letters, newest first (GET /api/deliveries?status=dlq,
-- the console's dead letters): they were read each host's in turn and
-- sorted (every host's, up to a page each), or everyone's deliveries
-- walked newest first until a page of dead letters turned up. A partial
-- index holds the dead letters alone: written when a delivery is dead-
-- lettered, never at intake.
CREATE INDEX deliveries_dlq_received_idx ON deliveries (received_at DESC, delivery_id DESC) WHERE status = 'dlq';

-- +goose Down
DROP INDEX deliveries_dlq_received_idx;
