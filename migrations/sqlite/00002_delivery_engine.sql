-- +goose Up
-- Per-source retry schedules, snapshotted on each delivery at intake. The
-- schedule is a JSON array of milliseconds; NULL means the default policy.
ALTER TABLE sources ADD COLUMN retry_delays_ms TEXT;
-- 0: as many attempts as the schedule lists.
ALTER TABLE sources ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN retry_delays_ms TEXT;

-- Counts by state per host, status filters and DLQ purges.
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status);
-- Claim-code expiry sweeps.
CREATE INDEX hosts_claim_expires_idx ON hosts (claim_expires_at) WHERE claim_code_hash IS NOT NULL;

-- +goose Down
DROP INDEX hosts_claim_expires_idx;
DROP INDEX deliveries_host_status_idx;
ALTER TABLE deliveries DROP COLUMN retry_delays_ms;
ALTER TABLE sources DROP COLUMN max_attempts;
ALTER TABLE sources DROP COLUMN retry_delays_ms;
