-- +goose Up
-- A delivery's audit events, result and body no longer hold foreign keys
-- to it: a foreign key has Postgres check, for every row inserted, that its
-- delivery exists (a query of its own, locking the delivery's row FOR KEY
-- SHARE) — three audit events per delivery on the way to acked, its result
-- and its body, a seventh of the database's CPU in a drain. They are only
-- ever written in the transaction that finds or changes their delivery.
-- What the foreign keys did on delete (ON DELETE CASCADE) a trigger does,
-- once per statement for every delivery it deleted (retention, a host
-- removed, a purge), as SQLite's store does (its migration 16).
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_delivery_id_fkey;
ALTER TABLE delivery_results DROP CONSTRAINT delivery_results_delivery_id_fkey;
ALTER TABLE delivery_bodies DROP CONSTRAINT delivery_bodies_delivery_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_results r USING gone g WHERE r.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER deliveries_deleted AFTER DELETE ON deliveries
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION deliveries_deleted();

-- +goose Down
DROP TRIGGER deliveries_deleted ON deliveries;
DROP FUNCTION deliveries_deleted();
DELETE FROM delivery_events e WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = e.delivery_id);
DELETE FROM delivery_results r WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = r.delivery_id);
DELETE FROM delivery_bodies b WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = b.delivery_id);
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (delivery_id) ON DELETE CASCADE;
ALTER TABLE delivery_results ADD CONSTRAINT delivery_results_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (delivery_id) ON DELETE CASCADE;
ALTER TABLE delivery_bodies ADD CONSTRAINT delivery_bodies_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (delivery_id) ON DELETE CASCADE;
