-- +goose Up
-- The intake edge: the rejections audit, the quarantine of requests whose
-- source secret could not be decrypted, and small settings.
CREATE TABLE rejections (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host_id      text NOT NULL,
    source       text NOT NULL,
    at           timestamptz NOT NULL,
    status       integer NOT NULL,
    reason       text NOT NULL,
    client_ip    text NOT NULL DEFAULT '',
    header_names jsonb NOT NULL DEFAULT '[]'
);

CREATE INDEX rejections_host_idx ON rejections (host_id, id);
CREATE INDEX rejections_at_idx ON rejections (at);

CREATE TABLE quarantine (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host_id     text NOT NULL,
    source      text NOT NULL,
    url         text NOT NULL DEFAULT '',
    headers     jsonb NOT NULL,
    body        bytea NOT NULL,
    client_ip   text NOT NULL DEFAULT '',
    received_at timestamptz NOT NULL
);

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- +goose Down
DROP TABLE meta;
DROP TABLE quarantine;
DROP TABLE rejections;
