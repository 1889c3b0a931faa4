-- +goose Up
-- The delivery keys lead with the event id. A look-up by event id on
-- every host (GET /api/deliveries?event_id=, cloud ctl inspect) read
-- one range of the key per source of every host and group: 2,000 look-ups
-- at 1,000 hosts of two sources, present or not. The same columns in
-- another order keep the same uniqueness (intake's dedupe names the
-- columns, not their order) and cost intake nothing more: an event id is
-- random, so an insert wrote a random page of its host's and source's part
-- of the key before, of the whole key now. Rebuilding both reads the
-- table once and holds the writer meanwhile (docs/deploy.md, Upgrading).
DROP INDEX deliveries_event_idx;
CREATE UNIQUE INDEX deliveries_event_idx ON deliveries (event_id, host_id, source) WHERE group_id = '';
DROP INDEX deliveries_group_event_idx;
CREATE UNIQUE INDEX deliveries_group_event_idx ON deliveries (event_id, group_id, source, lane) WHERE group_id <> '';

-- +goose Down
DROP INDEX deliveries_group_event_idx;
CREATE UNIQUE INDEX deliveries_group_event_idx ON deliveries (group_id, source, event_id, lane) WHERE group_id <> '';
DROP INDEX deliveries_event_idx;
CREATE UNIQUE INDEX deliveries_event_idx ON deliveries (host_id, source, event_id) WHERE group_id = '';
