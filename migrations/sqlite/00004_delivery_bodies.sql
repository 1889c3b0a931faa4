-- +goose Up
-- A webhook's body lives in a table of its own, written once at intake and
-- read when the delivery is leased or shown. SQLite rewrites a whole row on
-- every update: with a 3 KB body inline, each of a delivery's state changes
-- wrote about a page of its own to the WAL; without it, a page holds a dozen
-- deliveries.
CREATE TABLE delivery_bodies (
    delivery_id TEXT PRIMARY KEY REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    raw_body    BLOB NOT NULL
) STRICT;

INSERT INTO delivery_bodies (delivery_id, raw_body) SELECT delivery_id, raw_body FROM deliveries;
ALTER TABLE deliveries DROP COLUMN raw_body;

-- +goose Down
ALTER TABLE deliveries ADD COLUMN raw_body BLOB NOT NULL DEFAULT x'';
UPDATE deliveries SET raw_body = (SELECT b.raw_body FROM delivery_bodies b WHERE b.delivery_id = deliveries.delivery_id);
DROP TABLE delivery_bodies;
