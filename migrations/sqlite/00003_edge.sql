-- +goose Up
-- The intake edge: the rejections audit, the quarantine of requests whose
-- source secret could not be decrypted, and small settings.
CREATE TABLE rejections (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id      TEXT NOT NULL,
    source       TEXT NOT NULL,
    at           INTEGER NOT NULL,
    status       INTEGER NOT NULL,
    reason       TEXT NOT NULL,
    client_ip    TEXT NOT NULL DEFAULT '',
    header_names TEXT NOT NULL DEFAULT '[]'
) STRICT;

CREATE INDEX rejections_host_idx ON rejections (host_id, id);
CREATE INDEX rejections_at_idx ON rejections (at);

CREATE TABLE quarantine (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id     TEXT NOT NULL,
    source      TEXT NOT NULL,
    url         TEXT NOT NULL DEFAULT '',
    headers     TEXT NOT NULL,
    body        BLOB NOT NULL,
    client_ip   TEXT NOT NULL DEFAULT '',
    received_at INTEGER NOT NULL
) STRICT;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

-- +goose Down
DROP TABLE meta;
DROP TABLE quarantine;
DROP TABLE rejections;
