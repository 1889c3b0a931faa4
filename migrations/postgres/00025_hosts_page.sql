-- +goose Up
-- The host list is read a page at a time, oldest first (GET /api/hosts
-- with limit and cursor, the console's hosts page): each page starts
-- where the last ended in this index instead of sorting every host.
-- hosts holds one row a host, so it is built in a moment.
CREATE INDEX hosts_created_idx ON hosts (created_at, id);

-- +goose Down
DROP INDEX hosts_created_idx;
