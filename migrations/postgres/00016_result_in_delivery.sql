-- +goose Up
-- A delivery's last reported result moves into its row. A host reports a
-- run's result with its ack, and the ack writes a new version of the
-- delivery's row anyway: written there, the result costs a few columns of
-- that version, where its own table cost a row, a key entry and the look-up
-- of the delivery, for every delivery (a seventh of the database's CPU in
-- a drain). result IS NULL: no result reported.
ALTER TABLE deliveries
    ADD COLUMN result                 text,
    ADD COLUMN result_attempt         integer,
    ADD COLUMN result_handler         text,
    ADD COLUMN result_response_status integer,
    ADD COLUMN result_exit_code       integer,
    ADD COLUMN result_duration_ms     bigint,
    ADD COLUMN result_error           text,
    ADD COLUMN result_reported_at     timestamptz;

UPDATE deliveries d SET result = r.result, result_attempt = r.attempt, result_handler = r.handler,
    result_response_status = r.response_status, result_exit_code = r.exit_code,
    result_duration_ms = r.duration_ms, result_error = r.error, result_reported_at = r.reported_at
FROM delivery_results r WHERE r.delivery_id = d.delivery_id;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TABLE delivery_results;

-- +goose Down
CREATE TABLE delivery_results (
    delivery_id     text PRIMARY KEY,
    attempt         integer NOT NULL DEFAULT 0,
    result          text NOT NULL,
    handler         text NOT NULL DEFAULT '',
    response_status integer,
    exit_code       integer,
    duration_ms     bigint NOT NULL DEFAULT 0,
    error           text NOT NULL DEFAULT '',
    reported_at     timestamptz NOT NULL
);

INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
    duration_ms, error, reported_at)
SELECT delivery_id, result_attempt, result, result_handler, result_response_status, result_exit_code,
    result_duration_ms, result_error, result_reported_at
FROM deliveries WHERE result IS NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_results r USING gone g WHERE r.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE deliveries
    DROP COLUMN result,
    DROP COLUMN result_attempt,
    DROP COLUMN result_handler,
    DROP COLUMN result_response_status,
    DROP COLUMN result_exit_code,
    DROP COLUMN result_duration_ms,
    DROP COLUMN result_error,
    DROP COLUMN result_reported_at;
