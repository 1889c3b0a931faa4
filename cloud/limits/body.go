package limits

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// BodyBudget bounds the request-body bytes intake holds at once: in all,
// per host and per client address. A request reserves its body's bytes
// before it reads them and gives them back when it ends (the stored copy
// is then the store's concern). The per-host share keeps one host's flood
// from taking the whole budget from the others; the per-address share
// keeps a flood at a real host's source from starving that host's
// provider, which sends from other addresses.
//
// A request that cannot get its bytes waits for others to give some back,
// at most wait, then is refused. A single body larger than a share is
// taken only while it has that share to itself.
//
// Large bodies (over small bytes: a flood's 25 MiB posts, rarely a real
// webhook) may fill only three quarters of the budget in all and of a
// host's share: the last quarter is kept for small ones, so that senders
// at many addresses posting large bodies cannot starve a host's provider
// of room for its everyday webhooks.
type BodyBudget struct {
	clock               clockwork.Clock
	wait                time.Duration
	max, maxHost, maxIP int64
	small               int64 // the largest body that may use the last quarter

	mu    sync.Mutex
	used  int64
	hosts map[string]int64 // host id → bytes held; no entry when none
	ips   map[string]int64 // client address (AddrKey) → bytes held
	freed chan struct{}    // closed when bytes are given back; nil while no one waits

	// Changed, if set, is told the bytes held in all after each change,
	// in order (under its lock). Set it before the first Lease.
	Changed func(used int64)
}

// NewBodyBudget bounds the bytes held to max in all, maxHost per host
// and maxIP per client address; a request waits at most wait for room.
func NewBodyBudget(clock clockwork.Clock, wait time.Duration, max, maxHost, maxIP int64) *BodyBudget {
	return &BodyBudget{clock: clock, wait: wait, max: max, maxHost: maxHost, maxIP: maxIP,
		small: smallBody, hosts: map[string]int64{}, ips: map[string]int64{}}
}

// BodyLease is one request's share of the budget.
type BodyLease struct {
	b        *BodyBudget
	host, ip string
	held     int64
}

// Lease starts a request's (empty) share for the host and client address.
func (b *BodyBudget) Lease(hostID, ip string) *BodyLease {
	return &BodyLease{b: b, host: hostID, ip: AddrKey(ip)}
}

// OverBudgetError says which share a request could not get its bytes from.
type OverBudgetError struct {
	share string // "in all", "per host" or "per client address"
	max   int64
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("request bodies in flight over the budget of %d bytes %s", e.max, e.share)
}

// Grow reserves n more bytes, waiting at most the budget's wait for them.
func (l *BodyLease) Grow(ctx context.Context, n int64) error {
	if n == 0 {
		return nil
	}
	b := l.b
	var timer clockwork.Timer
	for {
		b.mu.Lock()
		over := b.over(l, n)
		if over == nil {
			b.used += n
			b.hosts[l.host] += n
			b.ips[l.ip] += n
			l.held += n
			if b.Changed != nil {
				b.Changed(b.used)
			}
			b.mu.Unlock()
			return nil
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = b.clock.NewTimer(b.wait)
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.Chan():
			return over
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// smallBody is the largest body that may use the last quarter of the
// budget in all and of a host's share: most webhooks are a few KiB.
const smallBody = 1 << 20

// over reports the share that n more bytes for l do not fit in, if any.
func (b *BodyBudget) over(l *BodyLease, n int64) error {
	fits := func(used, max int64) bool { return used+n <= max || used == l.held }
	room := func(max int64) int64 {
		if l.held+n > b.small {
			return max - max/4
		}
		return max
	}
	switch {
	case !fits(b.ips[l.ip], b.maxIP):
		return &OverBudgetError{share: "per client address", max: b.maxIP}
	case !fits(b.hosts[l.host], room(b.maxHost)):
		return &OverBudgetError{share: "per host", max: b.maxHost}
	case !fits(b.used, room(b.max)):
		return &OverBudgetError{share: "in all", max: b.max}
	}
	return nil
}

// Release gives back everything the lease holds; it may be called again.
func (l *BodyLease) Release() {
	if l.held == 0 {
		return
	}
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= l.held
	if b.Changed != nil {
		b.Changed(b.used)
	}
	if b.hosts[l.host] -= l.held; b.hosts[l.host] == 0 {
		delete(b.hosts, l.host)
	}
	if b.ips[l.ip] -= l.held; b.ips[l.ip] == 0 {
		delete(b.ips, l.ip)
	}
	l.held = 0
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
}

// InUse reports the bytes held in all, and how many hosts and addresses
// hold some.
func (b *BodyBudget) InUse() (bytes int64, hosts, ips int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.hosts), len(b.ips)
}

// AddrKey is what a per-address bound counts by: an IPv4 address, or an
// IPv6 address's /64 (one subscriber's usual allocation). Anything that
// does not parse counts as itself.
func AddrKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
