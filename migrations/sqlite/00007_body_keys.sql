-- +goose Up
-- A body's key is an integer given in arrival order, held by its delivery
-- (body_id), no longer the delivery id. Delivery ids start with the
-- provider's event id, which is random (GitHub's are UUIDs, Stripe's
-- evt_…): keyed by it, every body written landed on a random page of the
-- key's index, and a batch of intake dirtied a page of it per webhook.
-- Keyed in arrival order, bodies are appended. A delivery's body goes with
-- it (the trigger), as the foreign key's cascade did.
CREATE TABLE delivery_bodies_by_id (
    id       INTEGER PRIMARY KEY,
    raw_body BLOB NOT NULL
) STRICT;

ALTER TABLE deliveries ADD COLUMN body_id INTEGER;
INSERT INTO delivery_bodies_by_id (id, raw_body) SELECT rowid, raw_body FROM delivery_bodies;
UPDATE deliveries SET body_id = (SELECT b.rowid FROM delivery_bodies b WHERE b.delivery_id = deliveries.delivery_id);
DROP TABLE delivery_bodies;
ALTER TABLE delivery_bodies_by_id RENAME TO delivery_bodies;

-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER delivery_bodies_delete;

CREATE TABLE delivery_bodies_by_delivery (
    delivery_id TEXT PRIMARY KEY REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    raw_body    BLOB NOT NULL
) STRICT;

INSERT INTO delivery_bodies_by_delivery (delivery_id, raw_body)
    SELECT d.delivery_id, b.raw_body FROM deliveries d JOIN delivery_bodies b ON b.id = d.body_id;
DROP TABLE delivery_bodies;
ALTER TABLE delivery_bodies_by_delivery RENAME TO delivery_bodies;
ALTER TABLE deliveries DROP COLUMN body_id;
