-- +goose Up
-- The quarantine's bounds count each request's stored bytes — body, headers
-- and URL, which a sender controls too — kept in size so that the bound is
-- checked without reading the rows; and each host has a share of it.
-- token_macs keeps keyed hashes of the headers that carried the source's
-- secret itself (token schemes), which are no longer stored.
ALTER TABLE quarantine ADD COLUMN size bigint NOT NULL DEFAULT 0;
ALTER TABLE quarantine ADD COLUMN token_macs jsonb NOT NULL DEFAULT '{}';
UPDATE quarantine SET size = octet_length(body) + octet_length(headers::text) + octet_length(url);

-- +goose Down
ALTER TABLE quarantine DROP COLUMN token_macs;
ALTER TABLE quarantine DROP COLUMN size;
