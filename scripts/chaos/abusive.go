package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// abuseConfig is how hard the attackers of scenario 7 push (flags
// -abuse-*).
type abuseConfig struct {
	scale    float64        // multiplies every attacker's rate and connections
	length   time.Duration  // how long the attack lasts
	rssBound int64          // bytes: the cloud's peak RSS must stay under it
	rssAbort int64          // bytes: past it the attack stops early, so that the machine survives a cloud without bounds
	kinds    *regexp.Regexp // the kinds of attack run; nil: all
}

const (
	abuseLegitRate  = 20.0            // signed webhooks per second from the provider-like sender
	abuseWarmup     = 5 * time.Second // legitimate traffic alone before the attack (the baseline latency)
	abuseCooldown   = 5 * time.Second // and after it
	abuseIPsPerKind = 4               // source addresses per kind of attack

	// longSegment is the length of a made-up host id or source name: one
	// path segment of about 1 MB, which fits in what Go's server reads of
	// a request line and headers (MaxHeaderBytes, 1 MiB, plus 4 KiB).
	longSegment = 1_000_000
	// floodHeaderBytes of junk header lines, 8 bytes each ("0a1b:1\r\n"):
	// 131,072 names. Go's server takes up to MaxHeaderBytes + 4 KiB of
	// request line and headers and counts no names; past it, 431.
	floodHeaderBytes = 1 << 20
	// slowTick is how often a slow client sends its next piece.
	slowHeaderTick = time.Second
	slowBodyTick   = 500 * time.Millisecond
	slowBodyPiece  = 16 << 10
	// requestTimeout bounds one attacking request.
	requestTimeout = 30 * time.Second
)

// attackKind is one kind of abuse of the cloud's public edge.
type attackKind struct {
	name  string
	conns int     // concurrent connections, at scale 1
	rate  float64 // requests started per second at most, at scale 1; 0: each connection goes on at once
	slow  bool    // each hit is a slow connection's life: report how long the cloud held them
	hit   func(ctx context.Context, a *attacker) (outcome string, held time.Duration)
}

// scaled is the number of connections at scale.
func (k *attackKind) scaled(scale float64) int { return max(1, int(float64(k.conns)*scale)) }

// abuseKinds are the attacks, all at once for the length of the attack.
func abuseKinds(t *abuseTarget) []*attackKind {
	return []*attackKind{
		{name: "long-host-ids", conns: 4, rate: 50, hit: t.longHostID},
		{name: "long-source-names", conns: 4, rate: 50, hit: t.longSource},
		{name: "unsigned-1MiB", conns: 8, rate: 40, hit: t.unsignedBody(1 << 20)},
		{name: "unsigned-25MiB", conns: 4, rate: 2, hit: t.unsignedBody(25 << 20)},
		{name: "header-flood", conns: 4, rate: 20, hit: t.headerFlood},
		{name: "claim-guess", conns: 8, rate: 500, hit: t.claimGuess},
		{name: "token-junk", conns: 8, rate: 500, hit: t.tokenJunk},
		{name: "slow-headers", conns: 100, slow: true, hit: t.slowHeaders},
		{name: "slow-bodies", conns: 100, slow: true, hit: t.slowBody},
	}
}

// runAbusive: a provider-like sender delivers signed webhooks at a steady
// rate from 127.0.0.1 to a real host while attackers, from other loopback
// addresses (127.0.0.2 on), flood the cloud's public edge: made-up 1 MB
// host ids and source names, unsigned 1 MiB and 25 MiB bodies to the real
// host's GitHub source, header floods, claim-code guesses and junk token
// exchanges, and slow clients trickling headers or bodies. It passes when
// every webhook that got a 2xx is handled once, the sender got a 2xx for
// every request (no 429 or 503: no legitimate request was refused for want
// of capacity, nor cut), and the cloud's peak RSS stays under the bound.
// On SQLite, the default engine.
func runAbusive(ctx context.Context, e *env) (r result) {
	cfg := e.abuse
	dataDir := e.dir("cloud-db")
	s, err := e.setupOn(ctx, "sqlite:"+filepath.Join(dataDir, "cloud.db"), 1, 1)
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	cloud, h := s.clouds[0], s.hosts[0]
	if err := e.startHost(ctx, h, cloud.url, e.dir(h.name)); err != nil {
		r.failf("start %s: %v", h.name, err)
		return
	}
	if err := canBind(attackIP(0, 0), cloud.addr); err != nil {
		r.skipped = fmt.Sprintf("cannot connect from another loopback address: %v", err)
		return
	}

	total := abuseWarmup + cfg.length + abuseCooldown
	snd := newSender(s.urls(), s.hosts, "ab", int(abuseLegitRate*total.Seconds()), abuseLegitRate, 60*time.Second)
	// A new connection for every webhook, as a provider opens them: the
	// slow clients must not keep the legitimate ones from being accepted.
	snd.client.Transport.(*http.Transport).DisableKeepAlives = true
	attackCtx, stopAttack := context.WithCancel(ctx)
	defer stopAttack()
	watch := watchRSS(cloud.PID(), cfg.rssBound, cfg.rssAbort, stopAttack)
	defer watch.stop()
	snd.start(ctx)
	select {
	case <-ctx.Done():
		return
	case <-time.After(abuseWarmup):
	}

	rssBefore := watch.current()
	dbBefore, logBefore := filesSize(dataDir, "cloud.db"), fileSize(cloud.LogPath)
	tgt := newAbuseTarget(cloud.addr, h.id)
	var kinds []*attackKind
	for _, k := range abuseKinds(tgt) {
		if cfg.kinds == nil || cfg.kinds.MatchString(k.name) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		r.failf("no kind of attack matches -abuse-kinds %s", cfg.kinds)
		return
	}
	e.logf("attack for %s at scale %g: %d kinds", cfg.length, cfg.scale, len(kinds))
	attackStart := time.Now()
	timer := time.AfterFunc(cfg.length, stopAttack)
	stats := attack(attackCtx, kinds, cfg.scale, cloud.addr)
	timer.Stop()
	attackEnd := time.Now()
	attacked := attackEnd.Sub(attackStart)
	dbAfter, logAfter := filesSize(dataDir, "cloud.db"), fileSize(cloud.LogPath)
	e.logf("attack over after %s; waiting for the sender", attacked.Round(100*time.Millisecond))
	snd.wait()
	peak, over, aborted := watch.stop()

	// What the attackers did.
	var perKind []string
	for i, k := range kinds {
		perKind = append(perKind, stats[i].summary(k, k.scaled(cfg.scale), attacked))
	}
	addrs := 0
	for _, k := range kinds {
		addrs += min(abuseIPsPerKind, k.scaled(cfg.scale))
	}
	r.figuref("attack %s from %d addresses: %s", attacked.Round(100*time.Millisecond), addrs, strings.Join(perKind, ", "))

	// What the provider saw.
	tries := snd.tries()
	var before, during []time.Duration
	refused := map[string]int{}
	nRefused := 0
	for _, t := range tries {
		switch {
		case t.sent.Before(attackStart):
			before = append(before, t.done.Sub(t.sent))
		case t.sent.Before(attackEnd):
			during = append(during, t.done.Sub(t.sent))
		}
		if t.status < 200 || t.status > 299 {
			label := "no answer"
			if t.status != 0 {
				label = strconv.Itoa(t.status)
			}
			refused[label]++
			nRefused++
		}
	}
	r.figuref("legitimate latency p50/p99: %s/%s before the attack, %s/%s during it (%d requests); of %d legitimate requests %d answered 429, %d 503, %d otherwise not 2xx",
		pct(before, 50), pct(before, 99), pct(during, 50), pct(during, 99), len(during),
		len(tries), refused["429"], refused["503"], nRefused-refused["429"]-refused["503"])
	overAt := ""
	if !over.IsZero() {
		overAt = fmt.Sprintf(", passed %s into the attack", over.Sub(attackStart).Round(100*time.Millisecond))
	}
	r.figuref("cloud RSS %s before the attack, peak %s (bound %s%s)", mib(rssBefore), mib(peak), mib(cfg.rssBound), overAt)
	r.figuref("during the attack the database grew %s and the cloud's log %s", mib(dbAfter-dbBefore), mib(logAfter-logBefore))
	if self, err := rig.ReadProc(os.Getpid()); err == nil {
		r.figuref("this process (attackers, sender, receiver) peak RSS %s", mib(self.VmHWM))
	}

	if !aborted.at.IsZero() {
		r.failf("attack stopped %s in: the cloud's RSS reached %s (over %s, -abuse-abort-mib)",
			aborted.at.Sub(attackStart).Round(100*time.Millisecond), mib(aborted.rss), mib(cfg.rssAbort))
	}
	if peak >= cfg.rssBound {
		r.failf("cloud peak RSS %s over the bound of %s", mib(peak), mib(cfg.rssBound))
	}
	if !cloud.Running() {
		r.failf("the cloud exited: %v\n%s", cloud.ExitErr(), cloud.Tail(10))
		return
	}
	if nRefused > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(refused)) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, refused[k]))
		}
		r.failf("%d legitimate requests not answered 2xx (%s)", nRefused, strings.Join(parts, ", "))
	}
	e.settleAndCompare(ctx, &r, s, snd, 120*time.Second, checkOpts{})
	return r
}

// attackIP is the source address of a kind's i-th connection: 127.0.0.2
// on, abuseIPsPerKind per kind (all of 127.0.0.0/8 is loopback on Linux).
func attackIP(kind, i int) net.IP {
	return net.IPv4(127, 0, 0, byte(2+kind*abuseIPsPerKind+i%abuseIPsPerKind))
}

// canBind checks that a connection from src to addr works.
func canBind(src net.IP, addr string) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// kindStats is what one kind of attack came to.
type kindStats struct {
	mu       sync.Mutex
	outcomes map[string]int  // HTTP status, or "cut", "timeout", "dial", "error"
	held     []time.Duration // slow kinds: how long the cloud kept each connection it cut
	toEnd    int             // slow kinds: connections still open when the attack ended
}

func (s *kindStats) add(outcome string, held time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if outcome == "" { // the attack ended mid-request
		s.toEnd++
		return
	}
	s.outcomes[outcome]++
	if held > 0 {
		s.held = append(s.held, held)
	}
}

func (s *kindStats) summary(k *attackKind, conns int, length time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(s.outcomes)) {
		n += s.outcomes[o]
		parts = append(parts, fmt.Sprintf("%s ×%d", o, s.outcomes[o]))
	}
	if len(parts) == 0 {
		parts = append(parts, "none answered")
	}
	if k.slow {
		slices.Sort(s.held)
		held := ""
		if len(s.held) > 0 {
			held = fmt.Sprintf(", held p50 %s max %s", pct(s.held, 50), s.held[len(s.held)-1].Round(100*time.Millisecond))
		}
		return fmt.Sprintf("%s %d at a time, %.1f opened/s (%s%s; %d open at the end)", k.name, conns,
			float64(n+s.toEnd)/length.Seconds(), strings.Join(parts, " "), held, s.toEnd)
	}
	return fmt.Sprintf("%s %.1f/s (%s)", k.name, float64(n)/length.Seconds(), strings.Join(parts, " "))
}

// attack runs every kind until ctx ends: each kind's connections (scaled)
// take turns at its rate. Goroutines: one per connection and one pacer per
// paced kind. Bytes in flight: bodies are streamed from one shared block,
// long segments and header floods are shared read-only slices.
func attack(ctx context.Context, kinds []*attackKind, scale float64, addr string) []*kindStats {
	stats := make([]*kindStats, len(kinds))
	var wg sync.WaitGroup
	for ki, k := range kinds {
		st := &kindStats{outcomes: map[string]int{}}
		stats[ki] = st
		var tokens chan struct{}
		if k.rate > 0 {
			tokens = make(chan struct{})
			every := max(time.Microsecond, time.Duration(float64(time.Second)/(k.rate*scale)))
			wg.Go(func() {
				tick := time.NewTicker(every)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					select {
					case tokens <- struct{}{}:
					default: // every connection busy: the rate is the cloud's
					}
				}
			})
		}
		for i := range k.scaled(scale) {
			a := &attacker{src: attackIP(ki, i), addr: addr, rng: rand.New(rand.NewPCG(uint64(ki), uint64(i)))}
			wg.Go(func() {
				defer a.close()
				for ctx.Err() == nil {
					if tokens != nil {
						select {
						case <-ctx.Done():
							return
						case <-tokens:
						}
					}
					outcome, held := k.hit(ctx, a)
					if ctx.Err() != nil && !k.slow {
						return // cut by the end of the attack, not by the cloud
					}
					st.add(outcome, held)
					if outcome == "dial" || k.slow && held < time.Second {
						// Refused, or cut at once: do not spin.
						select {
						case <-ctx.Done():
						case <-time.After(500 * time.Millisecond):
						}
					}
				}
			})
		}
	}
	wg.Wait()
	return stats
}
