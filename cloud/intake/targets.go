package intake

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/ipallow"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// Target is where a webhook goes: an active host and its enabled source,
// with what intake derives from them.
type Target struct {
	// Host is the host the URL names; for a group's URL, the group as the
	// edge treats a host (its id, name, status and rate limits).
	Host *store.Host
	// Group is the group the URL names, with its members as read (nil: a
	// host's URL).
	Group    *store.Group
	Source   *store.Source
	Provider verify.Provider
	Keys     [][]byte // the source's secrets, opened
	KeysErr  error    // why they did not open (no key configured decrypts them)
	// Allow is the source's allowlist, its sets' prefixes included; nil:
	// any address.
	Allow *ipallow.List
	// Forward is which of a request's headers are kept: its provider's,
	// and those the source names (verify.ForwardedHeaders).
	Forward verify.HeaderFilter
}

// TargetTTL bounds how long intake trusts a cached host and source should
// a change notification be lost; changes are otherwise seen at once.
const TargetTTL = 10 * time.Second

// Target returns the target hostID and name make, from the cache or the
// store. Errors are *shared.Error: not found or gone for the sender (answered at
// once for a name that could not exist, and cached otherwise), internal
// for a provider this build does not know, unavailable for a storage
// failure (shared.Unavailable). A secret that does not open is not an error:
// KeysErr says so.
func (s *Service) Target(ctx context.Context, hostID, name string) (*Target, error) {
	if err := checkNames(hostID, name); err != nil {
		// Made up: answered at once, neither looked up nor cached.
		return nil, err
	}
	return s.targets.get(hostID, name, s.now(), func() (*Target, error) { return s.resolve(ctx, hostID, name) })
}

// Forget drops what the cache holds of a host: its host or one of its
// sources changed.
func (s *Service) Forget(hostID string) { s.targets.drop(hostID) }

// ForgetAll drops every cached target: the keys or a named IP set changed,
// or changes may have gone untold.
func (s *Service) ForgetAll() { s.targets.reset() }

// Holds reports whether the cache holds a target (not an answer) for
// hostID and name.
func (s *Service) Holds(hostID, name string) bool {
	s.targets.mu.Lock()
	defer s.targets.mu.Unlock()
	e := s.targets.hosts[hostID][name]
	return e != nil && e.err == nil
}

// Cached reports the cache's entries and the bytes they hold (estimated).
func (s *Service) Cached() (entries int, bytes int64) { return s.targets.len() }

// resolve reads an active host, its enabled source and the source's
// provider from the store, and opens the source's secrets.
func (s *Service) resolve(ctx context.Context, hostID, name string) (*Target, error) {
	var host *store.Host
	var group *store.Group
	owner := "host"
	if auth.ValidGroupID(hostID) {
		g, err := s.store.GroupGet(ctx, hostID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, shared.NotFound("no such group")
		case err != nil:
			return nil, shared.Unavailable(err)
		case g.Status != store.HostActive:
			return nil, &shared.Error{Code: shared.CodeGone, Message: "group is deactivated"}
		}
		group, owner = g, "group"
		host = &store.Host{ID: g.ID, Name: g.Name, Status: g.Status, RateLimitPerMin: g.RateLimitPerMin,
			RateLimitBurst: g.RateLimitBurst, CreatedAt: g.CreatedAt}
	} else {
		h, err := s.store.HostGet(ctx, hostID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, shared.NotFound("no such host")
		case err != nil:
			return nil, shared.Unavailable(err)
		case h.Status != store.HostActive:
			return nil, &shared.Error{Code: shared.CodeGone, Message: "host is deactivated"}
		}
		host = h
	}
	src, err := s.store.SourceGet(ctx, hostID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, shared.NotFound("no such source on this " + owner)
	case err != nil:
		return nil, shared.Unavailable(err)
	case !src.Enabled:
		return nil, shared.NotFound("source is disabled")
	}
	provider, ok := verify.Lookup(src.Provider)
	if !ok {
		return nil, &shared.Error{Code: shared.CodeInternal, Message: "internal error",
			Cause: fmt.Errorf("source %s/%s: unknown provider %q", hostID, name, src.Provider)}
	}
	allow, err := s.resolveAllow(ctx, src)
	if err != nil {
		return nil, shared.Unavailable(err)
	}
	t := &Target{Host: host, Group: group, Source: src, Provider: provider, Allow: allow,
		Forward: verify.ForwardedHeaders(provider, src.Options)}
	t.Keys, t.KeysErr = s.openSecrets(src)
	return t, nil
}

// checkNames answers not found for a host or group id or source name that
// could not exist: of neither NewHostID's nor NewGroupID's form, or not
// shared.ValidSourceName.
func checkNames(hostID, name string) error {
	if !auth.ValidHostID(hostID) && !auth.ValidGroupID(hostID) {
		return shared.NotFound("no such host")
	}
	if !shared.ValidSourceName(name) {
		return shared.NotFound("no such source on this host")
	}
	return nil
}

// targetCache keeps resolved targets — and the answers for unknown hosts
// and sources — so that a webhook costs no look-up queries. An entry goes
// when its host or one of its sources changes: this server drops it as it
// makes the change, every other replica when the store tells it
// (DeliveryListenParams.Changed); every entry when a named IP set changes
// (DeliveryListenParams.IPSetChanged: entries hold their sets' prefixes);
// and all entries when the store's
// listener starts again (changes may have gone untold meanwhile). Entries
// also expire after ttl, a bound on staleness should a notification be
// lost; every use of the cache first removes the entries that expired.
//
// Anyone can make up a webhook URL, so the cache is bounded: only
// well-formed keys reach it (intake checks them first), and targets and
// answers are kept apart, each bounded in entries and in bytes, oldest
// out first. A flood of made-up ids cycles through the answers and never
// pushes a real host's target out.
type targetCache struct {
	mu      sync.Mutex
	gen     uint64 // moves on with every drop: a load that began before one is not kept
	ttl     time.Duration
	hosts   map[string]map[string]*cachedTarget // host id → source name → entry
	found   cacheList                           // targets
	missing cacheList                           // 404 and 410 answers
}

type cachedTarget struct {
	hostID, name string
	t            *Target
	err          error // a 404 or 410 answer
	expires      time.Time
	size         int64
	in           *cacheList
	elem         *list.Element
}

// cacheList holds entries oldest first (so also in the order they expire),
// within its bounds.
type cacheList struct {
	l          list.List
	maxEntries int
	maxBytes   int64
	bytes      int64
}

// cacheBounds bound one of the cache's two lists.
type cacheBounds struct {
	entries int
	bytes   int64
}

// Bounds of the target cache: real hosts' sources are few and worth
// keeping; answers for unknown ones only spare the store repeated queries
// from a misconfigured sender.
var (
	targetCacheFound   = cacheBounds{entries: 100_000, bytes: 64 << 20}
	targetCacheMissing = cacheBounds{entries: 10_000, bytes: 4 << 20}
)

func newTargetCache(ttl time.Duration, found, missing cacheBounds) *targetCache {
	c := &targetCache{ttl: ttl, hosts: map[string]map[string]*cachedTarget{}}
	c.found.maxEntries, c.found.maxBytes = found.entries, found.bytes
	c.missing.maxEntries, c.missing.maxBytes = missing.entries, missing.bytes
	return c
}

// get returns the cached answer for (hostID, name), else loads it with load
// and keeps it: a target whose secrets opened, or a 404/410 answer.
func (c *targetCache) get(hostID, name string, now time.Time, load func() (*Target, error)) (*Target, error) {
	c.mu.Lock()
	c.expire(now)
	e, ok := c.hosts[hostID][name]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Before(e.expires) { // requests may insert a little out of order
		return e.t, e.err
	}
	t, err := load()
	if !cacheable(t, err) {
		return t, err
	}
	e = &cachedTarget{hostID: hostID, name: name, t: t, err: err, expires: now.Add(c.ttl)}
	e.size = e.estimate()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return t, err // changed while it loaded: the next request loads again
	}
	in := &c.found
	if err != nil {
		in = &c.missing
	}
	if e.size > in.maxBytes {
		return t, err
	}
	if old := c.hosts[hostID][name]; old != nil {
		c.remove(old)
	}
	srcs := c.hosts[hostID]
	if srcs == nil {
		srcs = map[string]*cachedTarget{}
		c.hosts[hostID] = srcs
	}
	srcs[name] = e
	e.in, e.elem = in, in.l.PushBack(e)
	in.bytes += e.size
	for in.l.Len() > in.maxEntries || in.bytes > in.maxBytes {
		c.remove(in.l.Front().Value.(*cachedTarget))
	}
	return t, err
}

// expire removes the entries that expired by now, oldest first.
func (c *targetCache) expire(now time.Time) {
	for _, in := range []*cacheList{&c.found, &c.missing} {
		for f := in.l.Front(); f != nil; f = in.l.Front() {
			e := f.Value.(*cachedTarget)
			if now.Before(e.expires) {
				break
			}
			c.remove(e)
		}
	}
}

func (c *targetCache) remove(e *cachedTarget) {
	e.in.l.Remove(e.elem)
	e.in.bytes -= e.size
	srcs := c.hosts[e.hostID]
	delete(srcs, e.name)
	if len(srcs) == 0 {
		delete(c.hosts, e.hostID)
	}
}

// entryOverhead approximates what an entry costs beyond its variable
// parts: its structs, list element and map slots.
const entryOverhead = 400

// estimate approximates the bytes an entry holds.
func (e *cachedTarget) estimate() int64 {
	n := entryOverhead + len(e.hostID) + len(e.name)
	if e.err != nil {
		return int64(n + len(e.err.Error()))
	}
	h, src := e.t.Host, e.t.Source
	n += len(h.ID) + len(h.Name) + len(h.AgentVersion) + len(h.CredentialHash) + len(h.ClaimCodeHash)
	n += len(h.Subscription)
	if g := e.t.Group; g != nil {
		n += 64 * len(g.Members)
	}
	n += len(src.HostID) + len(src.Name) + len(src.Provider) + 8*len(src.RetryDelays)
	for _, ev := range src.Events {
		n += 16 + len(ev)
	}
	for _, sec := range src.Secrets {
		n += 32 + len(sec.Ciphertext) + len(sec.Fingerprint)
	}
	for k, v := range src.Options {
		n += 32 + len(k) + len(v)
	}
	for _, k := range e.t.Keys {
		n += 24 + len(k)
	}
	for _, a := range src.AllowedIPs {
		n += 16 + len(a)
	}
	n += e.t.Forward.Size()
	if e.t.Allow != nil {
		n += 32 * len(e.t.Allow.Prefixes)
	}
	return int64(n)
}

// len reports the entries kept and the bytes they hold (estimated).
func (c *targetCache) len() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.found.l.Len() + c.missing.l.Len(), c.found.bytes + c.missing.bytes
}

// cacheable: a target whose secrets opened, or the answer that the host or
// source does not take webhooks. Storage failures and secrets that do not
// open are tried again on the next request.
func cacheable(t *Target, err error) bool {
	if err != nil {
		code := shared.CodeOf(err)
		return code == shared.CodeNotFound || code == shared.CodeGone
	}
	return t.KeysErr == nil
}

// drop forgets a host's entries.
func (c *targetCache) drop(hostID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, e := range c.hosts[hostID] {
		c.remove(e)
	}
}

// reset forgets every entry.
func (c *targetCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.hosts = map[string]map[string]*cachedTarget{}
	c.found.l.Init()
	c.missing.l.Init()
	c.found.bytes, c.missing.bytes = 0, 0
}
