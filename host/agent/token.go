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
// 80% of its lifetime has passed or when told the cloud refused it.
type tokenSource struct {
	cloud Cloud
	req   shared.TokenRequest
	clock clockwork.Clock
	mu    sync.Mutex
	token string
	renew time.Time
}

// fallbackLifetime is assumed when the answered expiry makes no sense on this
// host's clock (skew): the token is then renewed often, which is safe.
const fallbackLifetime = time.Minute

func (ts *tokenSource) Token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := ts.clock.Now()
	if ts.token != "" && now.Before(ts.renew) {
		return ts.token, nil
	}
	resp, err := ts.cloud.Token(ctx, ts.req)
	if err != nil {
		if st := cloudapi.StatusOf(err); st == http.StatusUnauthorized || st == http.StatusGone {
			return "", fmt.Errorf("%w: %v", ErrRevoked, err)
		}
		return "", err
	}
	lifetime := resp.TokenExpiresAt.Sub(now)
	if lifetime <= 0 || lifetime > 24*time.Hour {
		lifetime = fallbackLifetime
	}
	ts.token = resp.Token
	ts.renew = now.Add(lifetime * 8 / 10)
	return ts.token, nil
}

// Invalidate drops the current token; the next Token call fetches a new one.
func (ts *tokenSource) Invalidate() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.token = ""
}
