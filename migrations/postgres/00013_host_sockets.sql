-- +goose Up
-- The open socket of each host, across replicas. A new socket takes the
-- next epoch from the sequence (the later socket is the one with the
-- greater epoch, whatever the replicas' clocks say), and the replica
-- holding an older one closes it when LISTEN/NOTIFY tells it. owner is the
-- backend pid of the listening session of the replica holding the socket:
-- while that session lives, the replica does, and a new socket waits for
-- the old one to release what it carried. Unlogged: after a crash every
-- socket is gone anyway.
CREATE SEQUENCE host_socket_epoch;
CREATE UNLOGGED TABLE host_sockets (
    host_id text PRIMARY KEY,
    epoch   bigint NOT NULL,
    owner   integer NOT NULL
);

-- +goose Down
DROP TABLE host_sockets;
DROP SEQUENCE host_socket_epoch;
