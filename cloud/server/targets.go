package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// target is where a webhook goes: an active host and its enabled source,
// with what intake derives from them.
type target struct {
	host     *store.Host
	src      *store.Source
	provider verify.Provider
	sub      *shared.Subscription // the host's reported subscription; nil: none
	keys     [][]byte             // the source's secrets, opened
	keysErr  error                // why they did not open (no key configured decrypts them)
}

// resolveTarget reads an active host, its enabled source and the source's
// provider from the store, and opens the source's secrets. Errors are
// apiErrors: 404 or 410 for the sender, 500 for a provider this build does
// not know, 503 for a storage failure (isUnavailable). A secret that does
// not open is not an error: keysErr says so.
func (s *Server) resolveTarget(ctx context.Context, hostID, name string) (*target, error) {
	host, err := s.store.HostGet(ctx, hostID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errNotFound("no such host")
	case err != nil:
		return nil, errUnavailable(err)
	case host.Status != store.HostActive:
		return nil, &apiError{code: shared.CodeGone, message: "host is deactivated"}
	}
	src, err := s.store.SourceGet(ctx, hostID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errNotFound("no such source on this host")
	case err != nil:
		return nil, errUnavailable(err)
	case !src.Enabled:
		return nil, errNotFound("source is disabled")
	}
	provider, ok := verify.Lookup(src.Provider)
	if !ok {
		return nil, &apiError{code: shared.CodeInternal, message: "internal error",
			cause: fmt.Errorf("source %s/%s: unknown provider %q", hostID, name, src.Provider)}
	}
	t := &target{host: host, src: src, provider: provider, sub: parseSubscription(host.Subscription)}
	t.keys, t.keysErr = s.openSecrets(src)
	return t, nil
}

// parseSubscription reads a host's reported subscription; nil when it sent
// none (or one that does not parse), which filters nothing.
func parseSubscription(raw json.RawMessage) *shared.Subscription {
	if len(raw) == 0 {
		return nil
	}
	var sub shared.Subscription
	if json.Unmarshal(raw, &sub) != nil || sub.Webhooks == nil {
		return nil
	}
	return &sub
}

// subscribed applies the host's own reported subscription, if it sent one.
func (t *target) subscribed(ev verify.Event) bool {
	if t.sub == nil {
		return true
	}
	ss, ok := t.sub.Webhooks[t.src.Name]
	if !ok || !ss.Enabled {
		return false
	}
	return shared.EventWanted(ss.Events, ev.Type, ev.Action)
}

// targetCache keeps resolved targets — and the answers for unknown hosts
// and sources — so that a webhook costs no look-up queries. An entry goes
// when its host or one of its sources changes: this server drops it as it
// makes the change, every other replica when the store tells it
// (DeliveryListenParams.Changed), and all entries when the store's
// listener starts again (changes may have gone untold meanwhile). Entries
// also expire after ttl, a bound on staleness should a notification be
// lost.
type targetCache struct {
	mu    sync.Mutex
	gen   uint64 // moves on with every drop: a load that began before one is not kept
	ttl   time.Duration
	max   int // entries kept at most; past it the cache starts over
	count int
	hosts map[string]map[string]cachedTarget // host id → source name → entry
}

type cachedTarget struct {
	t       *target
	err     error // a 404 or 410 answer
	expires time.Time
}

func newTargetCache(ttl time.Duration, max int) *targetCache {
	return &targetCache{ttl: ttl, max: max, hosts: map[string]map[string]cachedTarget{}}
}

// get returns the cached answer for (hostID, name), else loads it with load
// and keeps it: a target whose secrets opened, or a 404/410 answer.
func (c *targetCache) get(hostID, name string, now time.Time, load func() (*target, error)) (*target, error) {
	c.mu.Lock()
	e, ok := c.hosts[hostID][name]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.t, e.err
	}
	t, err := load()
	if !cacheable(t, err) {
		return t, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return t, err // changed while it loaded: the next request loads again
	}
	if c.count >= c.max {
		c.hosts, c.count = map[string]map[string]cachedTarget{}, 0
	}
	srcs := c.hosts[hostID]
	if srcs == nil {
		srcs = map[string]cachedTarget{}
		c.hosts[hostID] = srcs
	}
	if _, had := srcs[name]; !had {
		c.count++
	}
	srcs[name] = cachedTarget{t: t, err: err, expires: now.Add(c.ttl)}
	return t, err
}

// cacheable: a target whose secrets opened, or the answer that the host or
// source does not take webhooks. Storage failures and secrets that do not
// open are tried again on the next request.
func cacheable(t *target, err error) bool {
	if err != nil {
		var ae *apiError
		return errors.As(err, &ae) && (ae.code == shared.CodeNotFound || ae.code == shared.CodeGone)
	}
	return t.keysErr == nil
}

// drop forgets a host's entries.
func (c *targetCache) drop(hostID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.count -= len(c.hosts[hostID])
	delete(c.hosts, hostID)
}

// reset forgets every entry.
func (c *targetCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.hosts, c.count = map[string]map[string]cachedTarget{}, 0
}
