-- +goose Up
-- The replay guard of sources whose provider signs without a timestamp
-- (GitHub, Shopify, GitLab): their deliveries keep the SHA-256 of the body,
-- the others NULL, and the partial index serves the one lookup intake makes
-- before it stores such a webhook — a delivery of the same host and source
-- with the same body, received within the window. A webhook caught by it
-- is held in the quarantine, beside the requests waiting for a key; kind
-- tells them apart and reason says why the request is held.
ALTER TABLE deliveries ADD COLUMN body_sha256 BLOB;
CREATE INDEX deliveries_body_digest_idx ON deliveries (host_id, source, body_sha256, received_at)
    WHERE body_sha256 IS NOT NULL;
ALTER TABLE quarantine ADD COLUMN kind TEXT NOT NULL DEFAULT 'secret';
ALTER TABLE quarantine ADD COLUMN reason TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE quarantine DROP COLUMN reason;
ALTER TABLE quarantine DROP COLUMN kind;
DROP INDEX deliveries_body_digest_idx;
ALTER TABLE deliveries DROP COLUMN body_sha256;
