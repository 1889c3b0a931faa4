-- +goose Up
-- A body is stored compressed when that saves space (the store's pack):
-- codec names the form the body column holds, 0 as received, 1 S2. Bodies
-- stored before keep 0 and are read as they are. The column is renamed
-- from raw_body so that a cloud older than this migration, which would
-- hand a compressed body on as it is stored, fails to read or write
-- bodies (an error its logs, hosts and providers see) rather than send
-- other bytes. Neither statement rewrites a row: this runs in a moment on
-- any size of store.
ALTER TABLE delivery_bodies RENAME COLUMN raw_body TO body;
ALTER TABLE delivery_bodies ADD COLUMN codec INTEGER NOT NULL DEFAULT 0;

-- +goose Down
-- relay_body is the cloud's own SQL function (it is on every connection
-- the cloud opens): each compressed body is written back as received.
UPDATE delivery_bodies SET body = relay_body(body, codec), codec = 0 WHERE codec <> 0;
ALTER TABLE delivery_bodies DROP COLUMN codec;
ALTER TABLE delivery_bodies RENAME COLUMN body TO raw_body;
