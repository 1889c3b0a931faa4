-- +goose Up
-- Groups of hosts. A group has a public URL of its own on the intake path
-- (/api/webhooks/:groupId/:source), its own sources and an ordered list of
-- members. Its sources live in sources beside the hosts' (keyed by the
-- group's id, which never collides with a host's: g_… against h_…), so the
-- source's foreign key to hosts goes; sources gain a mode (fanout or any,
-- '' for a host's own).
--
-- A group's webhook is stored as deliveries of its members: host_id is the
-- member that holds it (fanout: each member its own; any: the one it is
-- handed to, which changes on failover), group_id the group and lane the
-- member of a fanout delivery ('' otherwise). The dedupe key of a host's
-- own deliveries stays (host, source, event id); a group's is (group,
-- source, event id, lane), so that a member's own source and a group's of
-- the same name never take each other's events, and an any delivery stays
-- one however often it changes hands.
--
-- A fanout's deliveries share one stored body: body_of names the key its
-- body is stored under (NULL: the delivery's own id), and the trigger that
-- deletes bodies with their deliveries keeps a shared one while a delivery
-- still names it.
CREATE TABLE host_groups (
    id                 text PRIMARY KEY,
    name               text NOT NULL,
    status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deactivated')),
    rate_limit_per_min integer NOT NULL DEFAULT 0,
    rate_limit_burst   integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    deactivated_at     timestamptz
);

CREATE TABLE group_members (
    group_id text NOT NULL REFERENCES host_groups (id) ON DELETE CASCADE,
    host_id  text NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    position integer NOT NULL,
    added_at timestamptz NOT NULL,
    PRIMARY KEY (group_id, host_id)
);

CREATE INDEX group_members_host_idx ON group_members (host_id);

ALTER TABLE sources DROP CONSTRAINT sources_host_id_fkey;
ALTER TABLE sources ADD COLUMN mode text NOT NULL DEFAULT '' CHECK (mode IN ('', 'fanout', 'any'));

ALTER TABLE deliveries ADD COLUMN group_id text NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN lane text NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN body_of text;

CREATE UNIQUE INDEX deliveries_event_idx ON deliveries (host_id, source, event_id) WHERE group_id = '';
ALTER TABLE deliveries DROP CONSTRAINT deliveries_host_id_source_event_id_key;
CREATE UNIQUE INDEX deliveries_group_event_idx ON deliveries (group_id, source, event_id, lane) WHERE group_id <> '';
-- A fanout's deliveries by their shared body, for the body's deletion.
CREATE INDEX deliveries_body_of_idx ON deliveries (body_of) WHERE body_of IS NOT NULL;
-- A group's deliveries, newest first (the group's page, by member).
CREATE INDEX deliveries_group_received_idx ON deliveries (group_id, received_at DESC, delivery_id DESC)
    WHERE group_id <> '';
-- A group's deliveries by body, for its sources' replay guard.
CREATE INDEX deliveries_group_digest_idx ON deliveries (group_id, source, body_sha256, received_at)
    WHERE group_id <> '' AND body_sha256 IS NOT NULL;
-- An any group's deliveries waiting, for failover.
CREATE INDEX deliveries_group_waiting_idx ON deliveries (group_id, host_id, received_at)
    WHERE group_id <> '' AND lane = '' AND status IN ('queued', 'retrying');

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id AND g.body_of IS NULL;
    DELETE FROM delivery_bodies b USING (SELECT DISTINCT body_of FROM gone WHERE body_of IS NOT NULL) g
        WHERE b.delivery_id = g.body_of
            AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.body_of = g.body_of);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
DELETE FROM deliveries WHERE group_id <> '';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION deliveries_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM delivery_events e USING gone g WHERE e.delivery_id = g.delivery_id;
    DELETE FROM delivery_bodies b USING gone g WHERE b.delivery_id = g.delivery_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP INDEX deliveries_group_waiting_idx;
DROP INDEX deliveries_group_digest_idx;
DROP INDEX deliveries_group_received_idx;
DROP INDEX deliveries_body_of_idx;
DROP INDEX deliveries_group_event_idx;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_host_id_source_event_id_key UNIQUE (host_id, source, event_id);
DROP INDEX deliveries_event_idx;
ALTER TABLE deliveries DROP COLUMN body_of;
ALTER TABLE deliveries DROP COLUMN lane;
ALTER TABLE deliveries DROP COLUMN group_id;
DELETE FROM sources WHERE host_id NOT IN (SELECT id FROM hosts);
ALTER TABLE sources DROP COLUMN mode;
ALTER TABLE sources ADD CONSTRAINT sources_host_id_fkey FOREIGN KEY (host_id) REFERENCES hosts (id) ON DELETE CASCADE;
DROP TABLE group_members;
DROP TABLE host_groups;
