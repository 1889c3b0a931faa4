-- +goose Up
-- Each audit event carries the host that holds its delivery once the event
-- is recorded, and the delivery's source. The audit trail of every
-- delivery (GET /api/events, `cloud ctl tail`) answered them by joining
-- each event to its delivery: 500 events of 500 deliveries, whose rows lie
-- on as many pages (each lease and ack writes a row's new version wherever
-- there is room). Read from a cold cache at 10 million stored, that was
-- 61–113 ms; the events alone are a range of their id's index, their rows
-- written in that order.
--
-- Nullable, with no default: adding them changes only the catalog, at
-- once on a populated table. Events written before have neither; the read
-- takes those from their delivery, as it did.
ALTER TABLE delivery_events ADD COLUMN host_id text, ADD COLUMN source text;

-- +goose Down
ALTER TABLE delivery_events DROP COLUMN host_id, DROP COLUMN source;
