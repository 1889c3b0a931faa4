-- +goose Up
-- The console's login sessions. Only the SHA-256 of a session's id is kept;
-- the id itself is in the browser's cookie.
CREATE TABLE console_sessions (
    id_hash      bytea PRIMARY KEY,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_created ON console_sessions (created_at);

-- +goose Down
DROP TABLE console_sessions;
