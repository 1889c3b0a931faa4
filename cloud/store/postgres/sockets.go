package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

// socketChannel is the LISTEN/NOTIFY channel on which a host's socket is
// said to open ("o EPOCH HOST") or close ("c EPOCH HOST").
const socketChannel = "relay_host_socket"

func socketPayload(open bool, hostID string, epoch int64) string {
	op := "c"
	if open {
		op = "o"
	}
	return op + " " + strconv.FormatInt(epoch, 10) + " " + hostID
}

func parseSocketEvent(payload string) (store.SocketEvent, bool) {
	op, rest, ok1 := strings.Cut(payload, " ")
	num, hostID, ok2 := strings.Cut(rest, " ")
	epoch, err := strconv.ParseInt(num, 10, 64)
	if !ok1 || !ok2 || err != nil || (op != "o" && op != "c") {
		return store.SocketEvent{}, false
	}
	return store.SocketEvent{HostID: hostID, Epoch: epoch, Open: op == "o"}, true
}

func (s *Store) SocketOpen(ctx context.Context, hostID string) (*store.SocketOpenResult, error) {
	res := &store.SocketOpenResult{}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The host's row, locked: sockets of one host opening at once take
		// their epochs in turn, each seeing the one before. One statement
		// that inserts or locks: a row deleted by the older socket's close
		// between an insert that found it and a separate SELECT … FOR
		// UPDATE would leave nothing to lock.
		var old int64
		var live bool
		if err := tx.QueryRow(ctx, `
			WITH cur AS (
				INSERT INTO host_sockets (host_id, epoch, owner) VALUES ($1, 0, 0)
				ON CONFLICT (host_id) DO UPDATE SET epoch = host_sockets.epoch
				RETURNING epoch, owner)
			SELECT epoch, owner <> 0 AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = owner) FROM cur`,
			hostID).Scan(&old, &live); err != nil {
			return err
		}
		if live {
			res.Replaced = old
		}
		if err := tx.QueryRow(ctx, `
			UPDATE host_sockets SET epoch = nextval('host_socket_epoch'), owner = $2
			WHERE host_id = $1 RETURNING epoch`, hostID, int32(s.listenPID.Load())).Scan(&res.Epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, socketChannel, socketPayload(true, hostID, res.Epoch))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("socket open: %w", interpretError(err))
	}
	return res, nil
}

func (s *Store) SocketClose(ctx context.Context, hostID string, epoch int64) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM host_sockets WHERE host_id = $1 AND epoch = $2`, hostID, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, socketChannel, socketPayload(false, hostID, epoch))
		return err
	})
	if err != nil {
		return fmt.Errorf("socket close: %w", interpretError(err))
	}
	return nil
}
