-- +goose Up
-- The audit trail's index is led by the time its delivery was received,
-- no longer by the delivery id. Delivery ids ({source}:{event_id}:{ms})
-- start with the provider's event id, which is random (GitHub's are UUIDs,
-- Stripe's evt_…): keyed by it, every webhook's "received" event landed on
-- a random page of the index, and a batch of intake dirtied (and wrote to
-- the WAL) a page of it per webhook. The id's last 13 characters are its
-- received millisecond: led by them, a new delivery's events are appended
-- and a draining backlog's stay on a few pages. Lookups by delivery id
-- name the same expression (eventKey in the store), so the index still
-- finds a delivery's events whatever its id looks like.
--
-- The foreign key goes (its cascade would look events up by delivery_id
-- alone, a full scan without an index led by it); a delivery's events go
-- with it by the trigger, as its body does (migration 7).
CREATE TABLE delivery_events_keyed (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL,
    at          INTEGER NOT NULL,
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    attempt     INTEGER NOT NULL
) STRICT;

INSERT INTO delivery_events_keyed (id, delivery_id, at, from_status, to_status, reason, attempt)
    SELECT id, delivery_id, at, from_status, to_status, reason, attempt FROM delivery_events ORDER BY id;
-- Ids are never reused (AUTOINCREMENT): the new table goes on from the
-- old one's sequence, not from its largest id left.
DELETE FROM sqlite_sequence WHERE name = 'delivery_events_keyed';
INSERT INTO sqlite_sequence (name, seq) SELECT 'delivery_events_keyed', seq FROM sqlite_sequence WHERE name = 'delivery_events';
DROP TABLE delivery_events;
ALTER TABLE delivery_events_keyed RENAME TO delivery_events;

CREATE INDEX delivery_events_received_idx ON delivery_events (substr(delivery_id, -13), delivery_id, id);

-- +goose StatementBegin
CREATE TRIGGER delivery_events_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_events
    WHERE substr(delivery_id, -13) = substr(OLD.delivery_id, -13) AND delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER delivery_events_delete;

CREATE TABLE delivery_events_by_delivery (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    attempt     INTEGER NOT NULL
) STRICT;

INSERT INTO delivery_events_by_delivery (id, delivery_id, at, from_status, to_status, reason, attempt)
    SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt
    FROM delivery_events e WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = e.delivery_id)
    ORDER BY e.id;
DELETE FROM sqlite_sequence WHERE name = 'delivery_events_by_delivery';
INSERT INTO sqlite_sequence (name, seq) SELECT 'delivery_events_by_delivery', seq FROM sqlite_sequence WHERE name = 'delivery_events';
DROP TABLE delivery_events;
ALTER TABLE delivery_events_by_delivery RENAME TO delivery_events;

CREATE INDEX delivery_events_delivery_idx ON delivery_events (delivery_id, id);
