-- +goose Up
-- Retention only ever sweeps acked and dead-lettered deliveries, one status
-- at a time. Its indexes now hold only those, one per status (a form the
-- planner matches to a query naming that status), so intake, leasing and
-- "delivered", each of which changes the status, no longer write them.
DROP INDEX deliveries_status_updated_idx;
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at) WHERE status = 'dlq';

-- +goose Down
DROP INDEX deliveries_dlq_idx;
DROP INDEX deliveries_acked_idx;
CREATE INDEX deliveries_status_updated_idx ON deliveries (status, updated_at);
