-- +goose Up
-- A source may take webhooks only from listed addresses: CIDRs, single IPs
-- and names of IP sets (empty: any address). The named sets — a provider's
-- published webhook ranges — are refreshed by operators or on a schedule
-- and read by every replica from here; a failed refresh keeps the last
-- good prefixes and records its error.
ALTER TABLE sources ADD COLUMN allowed_ips jsonb NOT NULL DEFAULT '[]';

CREATE TABLE ip_sets (
    name         text PRIMARY KEY,
    prefixes     jsonb NOT NULL DEFAULT '[]',
    origin       text NOT NULL DEFAULT '',
    taken_at     timestamptz,
    refreshed_at timestamptz,
    checked_at   timestamptz NOT NULL,
    last_error   text NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE ip_sets;
ALTER TABLE sources DROP COLUMN allowed_ips;
