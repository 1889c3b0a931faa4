-- +goose Up
-- A webhook's body lives in a table of its own, written once at intake and
-- read when the delivery is leased or shown. Every state change rewrites a
-- delivery's row (Postgres writes a new row version, in every index, since
-- the status is indexed): with the body inline, each of a delivery's
-- transitions copied its compressed body again, most of a drain's writes.
CREATE TABLE delivery_bodies (
    delivery_id text PRIMARY KEY REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    raw_body    bytea NOT NULL
);

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE 'ALTER TABLE delivery_bodies ALTER COLUMN raw_body SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 compression unavailable; webhook bodies stay pglz-compressed';
END
$$;
-- +goose StatementEnd

INSERT INTO delivery_bodies (delivery_id, raw_body) SELECT delivery_id, raw_body FROM deliveries;
ALTER TABLE deliveries DROP COLUMN raw_body;

-- +goose Down
ALTER TABLE deliveries ADD COLUMN raw_body bytea NOT NULL DEFAULT '';
UPDATE deliveries d SET raw_body = b.raw_body FROM delivery_bodies b WHERE b.delivery_id = d.delivery_id;
ALTER TABLE deliveries ALTER COLUMN raw_body DROP DEFAULT;
DROP TABLE delivery_bodies;
