-- +goose NO TRANSACTION
-- +goose Up
-- A delivery, its body and its audit trail are found by indexes led by
-- the delivery id's last 13 characters, its received millisecond, no
-- longer by primary keys on the id. Delivery ids ({source}:{event_id}:{ms})
-- start with the provider's event id, which is random: keyed by it, each
-- webhook stored wrote a random leaf page of three indexes (deliveries,
-- delivery_bodies, delivery_events), and once those outgrow the cache,
-- each such page is read first and, on its first change after a
-- checkpoint, written whole to the WAL. Measured at 10 million deliveries,
-- a webhook wrote 31 KB of WAL against 6.3 KB on an empty database, and
-- intake ran at 0.57 of its rate there. Led by the received millisecond,
-- new entries are appended to the right edge of each index, as SQLite's
-- have been since its migrations 12 and 16. Lookups name the same
-- expression (idIs in the store; retention deletes by row address); the
-- indexes still hold delivery ids distinct. The dedupe key (event id, host,
-- source) stays the one index intake writes at random places.
--
-- Built concurrently: writes go on while each index is built (a build that
-- fails leaves an invalid index, dropped first on the next try; the
-- planner never uses one). Dropping the primary keys takes each table's
-- lock for a moment. Replicas of an older version fail intake from here
-- on (their ON CONFLICT names the primary key): upgrade them together
-- (docs/deploy.md, Upgrading).
DROP INDEX CONCURRENTLY IF EXISTS deliveries_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY deliveries_key_idx ON deliveries ((right(delivery_id, 13)), delivery_id);
DROP INDEX CONCURRENTLY IF EXISTS delivery_bodies_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY delivery_bodies_key_idx ON delivery_bodies ((right(delivery_id, 13)), delivery_id);
DROP INDEX CONCURRENTLY IF EXISTS delivery_events_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY delivery_events_key_idx ON delivery_events ((right(delivery_id, 13)), delivery_id, id);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g
        WHERE right(e.delivery_id, 13) = right(g.delivery_id, 13) AND e.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g
        WHERE right(b.delivery_id, 13) = right(g.delivery_id, 13) AND b.delivery_id = g.delivery_id
            AND g.body_of IS NULL;
    DELETE FROM delivery_bodies b USING (SELECT DISTINCT body_of FROM gone WHERE body_of IS NOT NULL) g
        WHERE right(b.delivery_id, 13) = right(g.body_of, 13) AND b.delivery_id = g.body_of
            AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.body_of = g.body_of);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE delivery_events DROP CONSTRAINT IF EXISTS delivery_events_pkey;
ALTER TABLE delivery_bodies DROP CONSTRAINT IF EXISTS delivery_bodies_pkey;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_pkey;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS deliveries_pkey;
CREATE UNIQUE INDEX CONCURRENTLY deliveries_pkey ON deliveries (delivery_id);
ALTER TABLE deliveries ADD CONSTRAINT deliveries_pkey PRIMARY KEY USING INDEX deliveries_pkey;
DROP INDEX CONCURRENTLY IF EXISTS delivery_bodies_pkey;
CREATE UNIQUE INDEX CONCURRENTLY delivery_bodies_pkey ON delivery_bodies (delivery_id);
ALTER TABLE delivery_bodies ADD CONSTRAINT delivery_bodies_pkey PRIMARY KEY USING INDEX delivery_bodies_pkey;
DROP INDEX CONCURRENTLY IF EXISTS delivery_events_pkey;
CREATE UNIQUE INDEX CONCURRENTLY delivery_events_pkey ON delivery_events (delivery_id, id);
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_pkey PRIMARY KEY USING INDEX delivery_events_pkey;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id AND g.body_of IS NULL;
    DELETE FROM delivery_bodies b USING (SELECT DISTINCT body_of FROM gone WHERE body_of IS NOT NULL) g
        WHERE b.delivery_id = g.body_of
            AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.body_of = g.body_of);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP INDEX CONCURRENTLY IF EXISTS delivery_events_key_idx;
DROP INDEX CONCURRENTLY IF EXISTS delivery_bodies_key_idx;
DROP INDEX CONCURRENTLY IF EXISTS deliveries_key_idx;
