package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/shared"
)

// ErrRevoked means the cloud refuses the host's credential: the host was
// deactivated, re-keyed or deleted. Running on is pointless.
var ErrRevoked = errors.New("host credential refused by the cloud (host deactivated or revoked); claim the host again")

// tokenSource hands out the host's current token, fetching a fresh one when
// 80% of its lifetime has passed or when told the cloud refused it. The
// lifetime is the cloud's (token_expires_at less the cloud's now), timed on
// this host's clock from when the token arrived: a host whose clock is
// hours off renews on time all the same.
type tokenSource struct {
	cloud Cloud
	req   shared.TokenRequest
	clock clockwork.Clock
	times *cloudTime // told the cloud's now of each answer (nil: not)
	mu    sync.Mutex
	token string
	got   time.Time // when the token arrived
	renew time.Time
}

// fallbackLifetime is assumed when the answered expiry makes no sense (a
// cloud that does not say its now, and this host's clock is off): the
// token is then renewed often, which is safe.
const fallbackLifetime = time.Minute

func (ts *tokenSource) Token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := ts.clock.Now()
	// A clock that went back since the token arrived says nothing of its
	// age: renew. (Go's monotonic clock never goes back; a clock with none
	// might.)
	if ts.token != "" && now.Before(ts.renew) && !now.Before(ts.got) {
		return ts.token, nil
	}
	resp, err := ts.cloud.Token(ctx, ts.req)
	if err != nil {
		if st := cloudapi.StatusOf(err); st == http.StatusUnauthorized || st == http.StatusGone {
			return "", fmt.Errorf("%w: %v", ErrRevoked, err)
		}
		return "", err
	}
	got := ts.clock.Now()
	if ts.times != nil {
		ts.times.observe(got, resp.Now)
	}
	lifetime := tokenLifetime(resp, now)
	ts.token, ts.got = resp.Token, got
	// Measured from when the request left: the cloud issued the token
	// after that.
	ts.renew = now.Add(lifetime * 8 / 10)
	return ts.token, nil
}

// tokenLifetime is how long a token lasts: on the cloud's clock alone when
// it says its now, else against this host's clock at sent, when that makes
// sense.
func tokenLifetime(resp shared.TokenResponse, sent time.Time) time.Duration {
	var lifetime time.Duration
	if !resp.Now.IsZero() {
		lifetime = resp.TokenExpiresAt.Sub(resp.Now)
	} else {
		lifetime = resp.TokenExpiresAt.Sub(sent)
	}
	if lifetime <= 0 || lifetime > 24*time.Hour {
		return fallbackLifetime
	}
	return lifetime
}

// Invalidate drops the current token; the next Token call fetches a new one.
func (ts *tokenSource) Invalidate() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.token = ""
}

// renewAt is when the current token is renewed (zero: none yet).
func (ts *tokenSource) renewAt() time.Time {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.renew
}
