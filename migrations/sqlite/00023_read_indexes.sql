-- +goose Up
-- Deliveries by correlation id (GET /api/deliveries?correlation_id=,
-- cloud ctl inspect). Without an index a look-up walked every delivery
-- newest first until a page turned up: all of them for an id that is not
-- there. The id is random, so each insert writes this index at a random
-- page: what that costs intake is in docs/deploy.md (Capacity).
CREATE INDEX deliveries_correlation_idx ON deliveries (correlation_id);

-- Each host's deliveries counted by status (GET /api/hosts, a host's page),
-- kept as the deliveries change: counting them grouped every delivery
-- kept, on every call. One writer, so each change adds to its row in
-- place; a host's rows go with it.
CREATE TABLE delivery_counts (
    host_id TEXT NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (host_id, status)
) STRICT, WITHOUT ROWID;

INSERT INTO delivery_counts (host_id, status, n)
    SELECT host_id, status, count(*) FROM deliveries GROUP BY host_id, status;

-- +goose StatementBegin
CREATE TRIGGER delivery_counts_insert AFTER INSERT ON deliveries
BEGIN
    INSERT INTO delivery_counts (host_id, status, n) VALUES (NEW.host_id, NEW.status, 1)
        ON CONFLICT (host_id, status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_counts_update AFTER UPDATE OF host_id, status ON deliveries
    WHEN OLD.host_id <> NEW.host_id OR OLD.status <> NEW.status
BEGIN
    UPDATE delivery_counts SET n = n - 1 WHERE host_id = OLD.host_id AND status = OLD.status;
    INSERT INTO delivery_counts (host_id, status, n) VALUES (NEW.host_id, NEW.status, 1)
        ON CONFLICT (host_id, status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_counts_delete AFTER DELETE ON deliveries
BEGIN
    UPDATE delivery_counts SET n = n - 1 WHERE host_id = OLD.host_id AND status = OLD.status;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_counts_host_delete AFTER DELETE ON hosts
BEGIN
    DELETE FROM delivery_counts WHERE host_id = OLD.id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER delivery_counts_host_delete;
DROP TRIGGER delivery_counts_delete;
DROP TRIGGER delivery_counts_update;
DROP TRIGGER delivery_counts_insert;
DROP TABLE delivery_counts;
DROP INDEX deliveries_correlation_idx;
