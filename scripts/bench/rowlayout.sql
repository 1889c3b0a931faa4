-- The row's layout against the drain's updates, on Postgres (BENCHMARKS.md,
-- "The forward's writes, Postgres's long-poll marks put off, ..."): N
-- deliveries with GitHub-like headers in the deliveries table as migrated,
-- their changing state copied into a narrow table `st` carrying only the
-- status-led indexes; then 40 leases and 40 acks of 500 deliveries spread
-- over the table, as the drain's statements update them, on each layout,
-- with the time and the WAL each wrote. On a throwaway database only: it
-- empties the deliveries table.
--
--   scripts/pgtest.sh start /tmp/pg > /tmp/pgurl
--   RELAY_DATABASE_URL=$(cat /tmp/pgurl) bin/cloud migrate
--   psql "$(cat /tmp/pgurl)" -q -v N=1000000 -f scripts/bench/rowlayout.sql
\timing off
SELECT set_config('x.n', :'N', false);
INSERT INTO hosts (id, name, created_at) VALUES ('h1', 'h1', now()) ON CONFLICT DO NOTHING;
DELETE FROM deliveries;
INSERT INTO deliveries (delivery_id, host_id, source, event_id, event_type, event_action, headers, body_size, status, attempts, max_attempts,
  received_at, correlation_id, updated_at, body_sha256)
SELECT 'dlv_' || lpad(i::text, 8, '0'), 'h1', 'github', md5(i::text), 'push', '',
  json_build_object('X-GitHub-Delivery', md5(i::text), 'X-GitHub-Event', 'push', 'X-Hub-Signature-256', 'sha256=' || md5(i::text) || md5((i+1)::text),
   'User-Agent', 'GitHub-Hookshot/abc1234', 'Content-Type', 'application/json', 'X-GitHub-Hook-ID', '123456789',
   'X-GitHub-Hook-Installation-Target-ID', '987654321', 'X-GitHub-Hook-Installation-Target-Type', 'repository', 'Accept', '*/*',
   'X-Forwarded-For', '140.82.115.1', 'Traceparent', '00-' || md5(i::text) || '-' || substr(md5((i+2)::text),1,16) || '-01'),
  14000, 'queued', 0, 6, now() + i * interval '1 ms', 'corr-' || md5((i+7)::text), now(), decode(md5(i::text) || md5(i::text), 'hex')
FROM generate_series(1, :N) i;
DROP TABLE IF EXISTS st;
CREATE TABLE st (delivery_id text PRIMARY KEY, host_id text NOT NULL, received_at timestamptz NOT NULL, status text NOT NULL,
  attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL, next_retry_at timestamptz, lease_expires_at timestamptz, last_error text NOT NULL DEFAULT '',
  delivered_at timestamptz, acked_at timestamptz, dlq_at timestamptz, updated_at timestamptz NOT NULL, group_id text NOT NULL DEFAULT '', lane text NOT NULL DEFAULT '',
  source text NOT NULL,
  result text, result_attempt int, result_handler text, result_response_status int, result_exit_code int, result_duration_ms bigint, result_error text, result_reported_at timestamptz);
INSERT INTO st (delivery_id, host_id, received_at, status, max_attempts, updated_at, source) SELECT delivery_id, host_id, received_at, status, max_attempts, updated_at, source FROM deliveries;
CREATE INDEX st_acked ON st (updated_at, host_id) WHERE status = 'acked';
CREATE INDEX st_available ON st (host_id, received_at, delivery_id) WHERE status IN ('queued','retrying');
CREATE INDEX st_dlq ON st (updated_at, host_id) WHERE status = 'dlq';
CREATE INDEX st_dlq_received ON st (received_at DESC, delivery_id DESC) WHERE status = 'dlq';
CREATE INDEX st_failing_att ON st (attempts, host_id, source) WHERE status = 'retrying' AND attempts >= 2;
CREATE INDEX st_failing ON st (host_id, source, attempts) WHERE status = 'retrying';
CREATE INDEX st_group_waiting ON st (group_id, host_id, received_at) WHERE group_id <> '' AND lane = '' AND status IN ('queued','retrying');
CREATE INDEX st_host_status ON st (host_id, status);
CREATE INDEX st_lease ON st (lease_expires_at) WHERE status IN ('delivering','delivered');
CREATE INDEX st_retrying ON st (updated_at, host_id) WHERE status = 'retrying';
VACUUM ANALYZE deliveries; VACUUM ANALYZE st;
-- The drain's updates, on either layout: 40 leases and 40 acks of 500.
CREATE FUNCTION pg_temp.drain(tbl text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE b int; ids text[]; N int := current_setting('x.n')::int; BEGIN
 FOR b IN 0..39 LOOP
  ids := ARRAY(SELECT 'dlv_' || lpad(((b*500+i) * (N/20000))::text, 8, '0') FROM generate_series(1, 500) i);
  EXECUTE format('UPDATE %I SET status=''delivering'', attempts=attempts+1, lease_expires_at=now()+interval ''5 min'', next_retry_at=NULL, updated_at=now() WHERE delivery_id = ANY($1) AND status IN (''queued'',''retrying'')', tbl) USING ids;
  EXECUTE format('UPDATE %I SET status=''acked'', acked_at=now(), delivered_at=now(), updated_at=now(), result=''success'', result_attempt=1, result_handler=''forward http://127.0.0.1/x'', result_response_status=200, result_duration_ms=3, result_reported_at=now() WHERE delivery_id = ANY($1) AND status=''delivering''', tbl) USING ids;
 END LOOP; END $$;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS w0 \gset
\timing on
SELECT pg_temp.drain('deliveries');
\timing off
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), :'w0')) AS wide_wal;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS w1 \gset
\timing on
SELECT pg_temp.drain('st');
\timing off
SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), :'w1')) AS narrow_wal;
