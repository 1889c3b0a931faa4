package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.ConsoleStore = (*Store)(nil)

func (s *Store) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at <= ? OR last_seen_at <= ?`,
			dbTime(p.Now), dbTime(p.IdleBefore)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
			DELETE FROM console_sessions WHERE id_hash IN (
				SELECT id_hash FROM console_sessions ORDER BY created_at DESC, id_hash LIMIT -1 OFFSET ?)`,
			p.Max-1); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO console_sessions (id_hash, created_at, last_seen_at, expires_at) VALUES (?, ?, ?, ?)`,
			p.IDHash, dbTime(p.Now), dbTime(p.Now), dbTime(p.ExpiresAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session create: %w", interpretError(err))
	}
	return &store.Session{IDHash: p.IDHash, CreatedAt: ms(p.Now), LastSeenAt: ms(p.Now), ExpiresAt: ms(p.ExpiresAt)}, nil
}

func (s *Store) SessionGet(ctx context.Context, idHash []byte) (*store.Session, error) {
	var v store.Session
	err := s.read.QueryRowContext(ctx, `SELECT id_hash, created_at, last_seen_at, expires_at FROM console_sessions WHERE id_hash = ?`, idHash).
		Scan(&v.IDHash, timeCol{&v.CreatedAt}, timeCol{&v.LastSeenAt}, timeCol{&v.ExpiresAt})
	if err != nil {
		return nil, fmt.Errorf("session get: %w", interpretError(err))
	}
	return &v, nil
}

func (s *Store) SessionTouch(ctx context.Context, idHash []byte, now time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE console_sessions SET last_seen_at = ? WHERE id_hash = ?`, dbTime(now), idHash)
	if err != nil {
		return fmt.Errorf("session touch: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("session touch: %w", store.ErrNotFound)
	}
	return nil
}

func (s *Store) SessionDelete(ctx context.Context, idHash []byte) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM console_sessions WHERE id_hash = ?`, idHash); err != nil {
		return fmt.Errorf("session delete: %w", err)
	}
	return nil
}

func (s *Store) SessionDeleteAll(ctx context.Context) (int, error) {
	res, err := s.write.ExecContext(ctx, `DELETE FROM console_sessions`)
	if err != nil {
		return 0, fmt.Errorf("session delete all: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("session delete all: %w", err)
	}
	return int(n), nil
}

func (s *Store) SessionCount(ctx context.Context) (int, error) {
	var n int
	if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("session count: %w", err)
	}
	return n, nil
}
