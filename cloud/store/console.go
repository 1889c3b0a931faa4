package store

import (
	"context"
	"errors"
	"time"
)

// ConsoleStore keeps the console's login sessions. A session is known by
// a keyed hash of its id only (the console's): the id itself lives in the
// browser's cookie.
type ConsoleStore interface {
	// SessionCreate stores a new session and, in the same transaction,
	// deletes sessions that ended (absolute expiry at or before Now, or
	// last seen at or before IdleBefore) and then the oldest live ones
	// beyond Max-1, so that at most Max sessions exist with the new one.
	// ErrConflict if the id hash is taken.
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*Session, error)
	// SessionGet returns a session, ended or not, or ErrNotFound.
	SessionGet(ctx context.Context, idHash []byte) (*Session, error)
	// SessionTouch moves a session's last-seen time to Now. ErrNotFound
	// for an unknown session.
	SessionTouch(ctx context.Context, idHash []byte, now time.Time) error
	// SessionDelete deletes a session (a no-op if there is none).
	SessionDelete(ctx context.Context, idHash []byte) error
	// SessionDeleteAll deletes every session, live or ended, and returns
	// how many it deleted: every console login ends at once.
	SessionDeleteAll(ctx context.Context) (int, error)
	// SessionCount counts the stored sessions, ended ones included.
	SessionCount(ctx context.Context) (int, error)
}

// Session is a console login.
type Session struct {
	IDHash     []byte
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time // absolute: the session ends then whatever its use
}

// SessionCreateParams is SessionCreate's input.
type SessionCreateParams struct {
	IDHash     []byte
	Now        time.Time
	ExpiresAt  time.Time
	IdleBefore time.Time // sessions last seen at or before it have ended
	Max        int       // sessions kept at most, the new one included (>= 1)
}

// Check says what is wrong with p, if anything; both engines refuse it
// before they write.
func (p *SessionCreateParams) Check() error {
	if p.Max < 1 {
		return errors.New("session create: Max must be at least 1")
	}
	return nil
}
