-- +goose Up
-- Each audit event carries the host that holds its delivery once the event
-- is recorded, and the delivery's source, so that the audit trail of every
-- delivery (GET /api/events, `cloud ctl tail`) reads the events alone
-- instead of each one's delivery beside it (see the Postgres migration
-- 29). Adding a column changes only the schema; events written before
-- have neither, and the read takes those from their delivery.
ALTER TABLE delivery_events ADD COLUMN host_id TEXT;
ALTER TABLE delivery_events ADD COLUMN source TEXT;

-- +goose Down
ALTER TABLE delivery_events DROP COLUMN source;
ALTER TABLE delivery_events DROP COLUMN host_id;
