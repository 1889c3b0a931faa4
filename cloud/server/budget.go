package server

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// bodyBudget bounds the request-body bytes intake holds at once: in all,
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
type bodyBudget struct {
	clock               clockwork.Clock
	wait                time.Duration
	max, maxHost, maxIP int64

	mu    sync.Mutex
	used  int64
	hosts map[string]int64 // host id → bytes held; no entry when none
	ips   map[string]int64 // client address (addrKey) → bytes held
	freed chan struct{}    // closed when bytes are given back; nil while no one waits
}

func newBodyBudget(clock clockwork.Clock, wait time.Duration, max, maxHost, maxIP int64) *bodyBudget {
	return &bodyBudget{clock: clock, wait: wait, max: max, maxHost: maxHost, maxIP: maxIP,
		hosts: map[string]int64{}, ips: map[string]int64{}}
}

// bodyLease is one request's share of the budget.
type bodyLease struct {
	b        *bodyBudget
	host, ip string
	held     int64
}

// lease starts a request's (empty) share for the host and client address.
func (b *bodyBudget) lease(hostID, ip string) *bodyLease {
	return &bodyLease{b: b, host: hostID, ip: addrKey(ip)}
}

// overBudgetError says which share a request could not get its bytes from.
type overBudgetError struct {
	share string // "in all", "per host" or "per client address"
	max   int64
}

func (e *overBudgetError) Error() string {
	return fmt.Sprintf("request bodies in flight over the budget of %d bytes %s", e.max, e.share)
}

// grow reserves n more bytes, waiting at most the budget's wait for them.
func (l *bodyLease) grow(ctx context.Context, n int64) error {
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

// over reports the share that n more bytes for l do not fit in, if any.
func (b *bodyBudget) over(l *bodyLease, n int64) error {
	fits := func(used, max int64) bool { return used+n <= max || used == l.held }
	switch {
	case !fits(b.ips[l.ip], b.maxIP):
		return &overBudgetError{share: "per client address", max: b.maxIP}
	case !fits(b.hosts[l.host], b.maxHost):
		return &overBudgetError{share: "per host", max: b.maxHost}
	case !fits(b.used, b.max):
		return &overBudgetError{share: "in all", max: b.max}
	}
	return nil
}

// release gives back everything the lease holds; it may be called again.
func (l *bodyLease) release() {
	if l.held == 0 {
		return
	}
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= l.held
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

// inUse reports the bytes held in all, and how many hosts and addresses
// hold some.
func (b *bodyBudget) inUse() (bytes int64, hosts, ips int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.hosts), len(b.ips)
}

// gauge reports the bytes held, as relay_intake_body_bytes_in_flight.
func (b *bodyBudget) gauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_intake_body_bytes_in_flight",
		Help: "Request-body bytes intake holds at once (reserved before they are read).",
	}, func() float64 {
		n, _, _ := b.inUse()
		return float64(n)
	})
}

// addrKey is what a per-address bound counts by: an IPv4 address, or an
// IPv6 address's /64 (one subscriber's usual allocation). Anything that
// does not parse counts as itself.
func addrKey(ip string) string {
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
