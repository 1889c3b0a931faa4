package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

var _ store.ConsoleStore = (*Store)(nil)

func (s *Store) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1 OR last_seen_at <= $2`,
			ms(p.Now), ms(p.IdleBefore)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			DELETE FROM console_sessions WHERE id_hash IN (
				SELECT id_hash FROM console_sessions ORDER BY created_at DESC, id_hash OFFSET $1)`,
			p.Max-1); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, created_at, last_seen_at, expires_at) VALUES ($1, $2, $2, $3)`,
			p.IDHash, ms(p.Now), ms(p.ExpiresAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session create: %w", interpretError(err))
	}
	return &store.Session{IDHash: p.IDHash, CreatedAt: ms(p.Now), LastSeenAt: ms(p.Now), ExpiresAt: ms(p.ExpiresAt)}, nil
}

func (s *Store) SessionGet(ctx context.Context, idHash []byte) (*store.Session, error) {
	var v store.Session
	err := s.pool.QueryRow(ctx, `SELECT id_hash, created_at, last_seen_at, expires_at FROM console_sessions WHERE id_hash = $1`, idHash).
		Scan(&v.IDHash, &v.CreatedAt, &v.LastSeenAt, &v.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("session get: %w", interpretError(err))
	}
	v.CreatedAt, v.LastSeenAt, v.ExpiresAt = ms(v.CreatedAt), ms(v.LastSeenAt), ms(v.ExpiresAt)
	return &v, nil
}

func (s *Store) SessionTouch(ctx context.Context, idHash []byte, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE console_sessions SET last_seen_at = $1 WHERE id_hash = $2`, ms(now), idHash)
	if err != nil {
		return fmt.Errorf("session touch: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("session touch: %w", store.ErrNotFound)
	}
	return nil
}

func (s *Store) SessionDelete(ctx context.Context, idHash []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("session delete: %w", err)
	}
	return nil
}

func (s *Store) SessionDeleteAll(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM console_sessions`)
	if err != nil {
		return 0, fmt.Errorf("session delete all: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func (s *Store) SessionCount(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("session count: %w", err)
	}
	return n, nil
}
