package limits

import (
	"container/list"
	"sync"
	"time"
)

// AuthLimiter throttles failed authentication — wrong claim codes, host
// credentials and admin tokens — per client: each failure takes a token from
// the client's bucket, which refills at perMin a minute up to perMin; a
// client whose bucket is empty is answered 429 with Retry-After before its
// attempt is looked at. A successful attempt takes nothing. At most max
// clients are remembered, the least recently seen forgotten first. Time comes
// from the caller.
type AuthLimiter struct {
	perMin float64
	max    int

	mu      sync.Mutex
	clients map[string]*list.Element // of *authBucket
	order   *list.List               // most recently seen first
}

type authBucket struct {
	client string
	tokens float64
	at     time.Time
}

// NewAuthLimiter lets perMin failures a minute through per client,
// remembering at most max clients.
func NewAuthLimiter(perMin, max int) *AuthLimiter {
	return &AuthLimiter{perMin: float64(perMin), max: max, clients: map[string]*list.Element{}, order: list.New()}
}

// Take takes a token from the client's bucket for an attempt. When none is
// left it reports how long until one is; otherwise refund gives the token
// back, for an attempt that succeeded.
func (l *AuthLimiter) Take(client string, now time.Time) (refund func(), wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(client, now)
	if b.tokens < 1 {
		return nil, time.Duration((1 - b.tokens) / l.perMin * float64(time.Minute))
	}
	b.tokens--
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		b.tokens = min(l.perMin, b.tokens+1)
	}, 0
}

// bucket returns the client's bucket, refilled as of now; l.mu is held.
func (l *AuthLimiter) bucket(client string, now time.Time) *authBucket {
	if e, ok := l.clients[client]; ok {
		l.order.MoveToFront(e)
		b := e.Value.(*authBucket)
		if d := now.Sub(b.at); d > 0 {
			b.tokens = min(l.perMin, b.tokens+d.Minutes()*l.perMin)
			b.at = now
		}
		return b
	}
	if l.order.Len() >= l.max {
		oldest := l.order.Back()
		l.order.Remove(oldest)
		delete(l.clients, oldest.Value.(*authBucket).client)
	}
	b := &authBucket{client: client, tokens: l.perMin, at: now}
	l.clients[client] = l.order.PushFront(b)
	return b
}

// Size is how many clients are remembered.
func (l *AuthLimiter) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
