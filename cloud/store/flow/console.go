package flow

import (
	"context"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// Sessions implements store.ConsoleStore on DB: the console's logins.
type Sessions struct{ DB DB }

var _ store.ConsoleStore = Sessions{}

func (c Sessions) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	now, expires := p.Now.Truncate(time.Millisecond).UTC(), p.ExpiresAt.Truncate(time.Millisecond).UTC()
	err := c.DB.InTx(ctx, func(tx Executor) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1 OR last_seen_at <= $2`,
			c.DB.Time(p.Now), c.DB.Time(p.IdleBefore)); err != nil {
			return err
		}
		// Room for the new one: the newest Max-1 stay.
		if _, err := tx.Exec(ctx, `
			DELETE FROM console_sessions WHERE id_hash NOT IN (
				SELECT id_hash FROM console_sessions ORDER BY created_at DESC, id_hash LIMIT $1)`,
			p.Max-1); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, created_at, last_seen_at, expires_at) VALUES ($1, $2, $2, $3)`,
			p.IDHash, c.DB.Time(p.Now), c.DB.Time(p.ExpiresAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session create: %w", err)
	}
	return &store.Session{IDHash: p.IDHash, CreatedAt: now, LastSeenAt: now, ExpiresAt: expires}, nil
}

func (c Sessions) SessionGet(ctx context.Context, idHash []byte) (*store.Session, error) {
	var v store.Session
	t := c.DB.Times()
	err := c.DB.Read().QueryRow(ctx, `SELECT id_hash, created_at, last_seen_at, expires_at FROM console_sessions WHERE id_hash = $1`, idHash).
		Scan(&v.IDHash, t.Time(&v.CreatedAt), t.Time(&v.LastSeenAt), t.Time(&v.ExpiresAt))
	if err != nil {
		return nil, fmt.Errorf("session get: %w", notFound(err))
	}
	return &v, nil
}

func (c Sessions) SessionTouch(ctx context.Context, idHash []byte, now time.Time) error {
	n, err := c.DB.Write().Exec(ctx, `UPDATE console_sessions SET last_seen_at = $1 WHERE id_hash = $2`, c.DB.Time(now), idHash)
	if err != nil {
		return fmt.Errorf("session touch: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("session touch: %w", store.ErrNotFound)
	}
	return nil
}

func (c Sessions) SessionDelete(ctx context.Context, idHash []byte) error {
	if _, err := c.DB.Write().Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("session delete: %w", err)
	}
	return nil
}

func (c Sessions) SessionDeleteAll(ctx context.Context) (int, error) {
	n, err := c.DB.Write().Exec(ctx, `DELETE FROM console_sessions`)
	if err != nil {
		return 0, fmt.Errorf("session delete all: %w", err)
	}
	return int(n), nil
}

func (c Sessions) SessionCount(ctx context.Context) (int, error) {
	var n int
	if err := c.DB.Read().QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("session count: %w", err)
	}
	return n, nil
}
