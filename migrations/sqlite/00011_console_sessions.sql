-- +goose Up
-- The console's login sessions. Only the SHA-256 of a session's id is kept;
-- the id itself is in the browser's cookie. Times are unix milliseconds.
CREATE TABLE console_sessions (
    id_hash      BLOB PRIMARY KEY,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX console_sessions_created ON console_sessions (created_at);

-- +goose Down
DROP TABLE console_sessions;
