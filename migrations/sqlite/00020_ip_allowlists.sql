-- +goose Up
-- A source may take webhooks only from listed addresses: CIDRs, single IPs
-- and names of IP sets (empty: any address). The named sets — a provider's
-- published webhook ranges — are refreshed by operators or on a schedule;
-- a failed refresh keeps the last good prefixes and records its error.
ALTER TABLE sources ADD COLUMN allowed_ips TEXT NOT NULL DEFAULT '[]';

CREATE TABLE ip_sets (
    name         TEXT PRIMARY KEY,
    prefixes     TEXT NOT NULL DEFAULT '[]',
    origin       TEXT NOT NULL DEFAULT '',
    taken_at     INTEGER,
    refreshed_at INTEGER,
    checked_at   INTEGER NOT NULL,
    last_error   TEXT NOT NULL DEFAULT ''
) STRICT;

-- +goose Down
DROP TABLE ip_sets;
ALTER TABLE sources DROP COLUMN allowed_ips;
