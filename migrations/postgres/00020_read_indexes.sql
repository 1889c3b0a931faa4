-- +goose Up
-- Deliveries by correlation id (GET /api/deliveries?correlation_id=,
-- cloud ctl inspect). Without an index a look-up walked every delivery
-- newest first until a page turned up: all of them for an id that is not
-- there. The id is random, so each insert writes this index at a random
-- page: what that costs intake is in docs/deploy.md (Capacity).
CREATE INDEX deliveries_correlation_idx ON deliveries (correlation_id);

-- Each host's deliveries counted by status (GET /api/hosts, a host's page),
-- kept as the deliveries change: counting them grouped every delivery
-- kept, on every call. A count kept in one row would have every writer of
-- a host's deliveries wait on that row (and two transactions that change
-- two statuses in opposite orders deadlock), so writers only append what
-- each statement changed to delivery_count_changes, and a sweep job folds
-- those into delivery_counts (DeliveryCountFold). A count is the sum of
-- both.
CREATE TABLE delivery_counts (
    host_id text NOT NULL,
    status  text NOT NULL,
    n       bigint NOT NULL,
    PRIMARY KEY (host_id, status)
);

CREATE TABLE delivery_count_changes (
    host_id text NOT NULL,
    status  text NOT NULL,
    n       bigint NOT NULL
);

INSERT INTO delivery_counts (host_id, status, n)
    SELECT host_id, status, count(*) FROM deliveries GROUP BY host_id, status;

-- +goose StatementBegin
CREATE FUNCTION delivery_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_changes (host_id, status, n)
        SELECT host_id, status, count(*) FROM added GROUP BY host_id, status;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION delivery_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_changes (host_id, status, n)
        SELECT host_id, status, sum(n) FROM (
            SELECT host_id, status, -1 AS n FROM before
            UNION ALL SELECT host_id, status, 1 FROM after) c
        GROUP BY host_id, status HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION delivery_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_changes (host_id, status, n)
        SELECT host_id, status, -count(*) FROM gone GROUP BY host_id, status;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER delivery_counts_inserted AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION delivery_counts_inserted();
CREATE TRIGGER delivery_counts_updated AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS before NEW TABLE AS after FOR EACH STATEMENT EXECUTE FUNCTION delivery_counts_updated();
CREATE TRIGGER delivery_counts_deleted AFTER DELETE ON deliveries
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION delivery_counts_deleted();

-- +goose Down
DROP TRIGGER delivery_counts_deleted ON deliveries;
DROP TRIGGER delivery_counts_updated ON deliveries;
DROP TRIGGER delivery_counts_inserted ON deliveries;
DROP FUNCTION delivery_counts_deleted();
DROP FUNCTION delivery_counts_updated();
DROP FUNCTION delivery_counts_inserted();
DROP TABLE delivery_count_changes;
DROP TABLE delivery_counts;
DROP INDEX deliveries_correlation_idx;
