-- +goose Up
-- The quarantine's bound is checked in the insert's transaction, on the
-- one writer: the count and sizes of all it holds and of the host's share.
-- size sits after the body in each row, so summing it read every body: a
-- full quarantine (10,000 requests of 100 KB) took 350–450 ms per request
-- quarantined, with the writer held. The index holds what the check reads.
CREATE INDEX quarantine_host_size_idx ON quarantine (host_id, size);

-- +goose Down
DROP INDEX quarantine_host_size_idx;
