-- +goose Up
-- Every host's dead letters, newest first (GET /api/deliveries?status=dlq,
-- the console's dead letters): everyone's deliveries were walked newest
-- first until a page of dead letters turned up. A partial index holds the
-- dead letters alone: written when a delivery is dead-lettered, never at
-- intake.
CREATE INDEX deliveries_dlq_received_idx ON deliveries (received_at DESC, delivery_id DESC) WHERE status = 'dlq';

-- The kept counts are rewritten every 5 s by the fold (DeliveryCountFold)
-- and their changes appended and deleted as often: room on each page for
-- the new versions of its rows (an update then stays on its page and
-- leaves the key alone), and a vacuum once a thousand are dead rather than
-- a fifth of the table. At a million deliveries and 1,000 hosts the counts
-- had grown to ten times their live size, read from disk on each host list.
ALTER TABLE delivery_counts SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE delivery_count_changes SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

-- +goose Down
ALTER TABLE delivery_count_changes RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE delivery_counts RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
DROP INDEX deliveries_dlq_received_idx;
