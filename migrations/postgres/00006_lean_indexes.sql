-- +goose Up
-- Fewer index entries per state change. Every transition writes a new
-- version of the delivery's row (its status is indexed, so no update is
-- HOT), with an entry in each index whose predicate the new row meets.
--
-- Retention only ever sweeps acked and dead-lettered deliveries, one status
-- at a time. Its indexes now hold only those, one per status, so intake,
-- leasing and "delivered" no longer write them.
DROP INDEX deliveries_status_updated_idx;
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at) WHERE status = 'dlq';

-- An audit trail is read by delivery, in order: that is now its primary
-- key, so each event writes one index entry instead of two.
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_pkey;
DROP INDEX delivery_events_delivery_idx;
ALTER TABLE delivery_events ADD PRIMARY KEY (delivery_id, id);

-- +goose Down
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_pkey;
ALTER TABLE delivery_events ADD PRIMARY KEY (id);
CREATE INDEX delivery_events_delivery_idx ON delivery_events (delivery_id, id);
DROP INDEX deliveries_dlq_idx;
DROP INDEX deliveries_acked_idx;
CREATE INDEX deliveries_status_updated_idx ON deliveries (status, updated_at);
