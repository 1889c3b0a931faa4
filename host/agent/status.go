package agent

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/shared"
)

// Status is a snapshot of what the agent is doing, for the host's local
// page: its link to the cloud, the handlers running, the webhooks waiting
// and the room flow control leaves. Every time in it is on this host's clock.
type Status struct {
	HostID string
	Link   LinkStatus
	// Workers is how many handlers may run at once; Window how many
	// webhooks may be in flight (leased and not yet recorded), InFlight how
	// many are. Credit is the room left (Window - InFlight, at least 0).
	Workers, Window, InFlight, Credit int
	// Queued counts webhooks taken in and waiting for a worker.
	Queued  int
	Running []RunningWebhook // oldest first
	Sources []SourceLoad     // sources with work running or waiting, by name
	// Stopping: the agent takes no new work; Unrecordable: the ledger
	// could not record an outcome lately, and the agent takes none either.
	Stopping, Unrecordable bool
}

// RunningWebhook is a handler running now.
type RunningWebhook struct {
	DeliveryID, Source, EventType, EventAction string
	Attempt                                    int // the cloud's attempt
	Started                                    time.Time
}

// SourceLoad is one source's work on the pool.
type SourceLoad struct {
	Source           string
	Running, Waiting int
}

// LinkStatus is the agent's connection to the cloud.
type LinkStatus struct {
	// Configured is the transport asked for (auto, websocket, heartbeat);
	// InUse the one carrying webhooks now: TransportWebSocket,
	// TransportHeartbeat, or "" before the first exchange and while a
	// socket-only host cannot connect. Since is when InUse last changed.
	Configured, InUse string
	// Compress: the cloud is asked to compress what it sends.
	Compress bool
	Since    time.Time
	// LastContact is the last successful exchange with the cloud (zero:
	// none yet); LastError why the last one failed ("" if it succeeded).
	LastContact time.Time
	LastError   string
	// SocketConnects counts sockets opened, Reconnects those after the
	// first; Fallbacks how often a host on auto went from the socket to
	// heartbeats.
	SocketConnects, Reconnects, Fallbacks int
	// TokenExpires is when the current token expires, on this host's clock
	// (zero: no token yet).
	TokenExpires time.Time
	// Skew is how far this host's clock is ahead of the cloud's; SkewKnown
	// is false until the cloud said its time.
	Skew      time.Duration
	SkewKnown bool
}

// Status returns a snapshot of the agent's state.
func (a *Agent) Status() Status {
	s := Status{
		HostID:       a.opts.HostID,
		Workers:      a.opts.Workers,
		Window:       a.flow.windowSize(),
		InFlight:     a.flow.count(),
		Stopping:     a.Stopping(),
		Unrecordable: a.Unrecordable(),
	}
	s.Credit = max(s.Window-s.InFlight, 0)
	s.Queued, s.Running, s.Sources = a.pool.snapshot()
	s.Link = a.link.status()
	if s.Link.Configured == "" {
		s.Link.Configured = TransportHeartbeat
	}
	s.Link.LastContact, s.Link.LastError = a.LastHeartbeat(), a.LastHeartbeatError()
	s.Link.Skew, s.Link.SkewKnown = a.ClockSkew()
	return s
}

// link follows which transport carries webhooks, as the calls to the
// cloud show it: a socket opened means the socket, a heartbeat sent means
// heartbeats. It watches the Cloud the transports are given (watchCloud),
// so the transports themselves need not report to it.
type link struct {
	configured string
	compress   bool
	now        func() time.Time

	mu                  sync.Mutex
	inUse               string
	since               time.Time
	connects, fallbacks int
	tokenExpires        time.Time
}

func (l *link) use(transport string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse == transport {
		return
	}
	// Heartbeats after a socket was open are a fall back; starting on
	// them, while the socket never opened, is not.
	if transport == TransportHeartbeat && l.configured == TransportAuto && l.connects > 0 {
		l.fallbacks++
	}
	l.inUse, l.since = transport, l.now()
}

func (l *link) socketOpened() {
	l.mu.Lock()
	l.connects++
	l.mu.Unlock()
	l.use(TransportWebSocket)
}

// socketFailed: a socket could not be opened. A host on heartbeats stays
// on them; one whose socket was in use has lost it.
func (l *link) socketFailed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse == TransportWebSocket {
		l.inUse, l.since = "", l.now()
	}
}

// token notes a token issued: its lifetime on the cloud's clock, timed from
// when it arrived on this host's.
func (l *link) token(resp shared.TokenResponse, got time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokenExpires = got.Add(tokenLifetime(resp, got))
}

func (l *link) status() LinkStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LinkStatus{Configured: l.configured, Compress: l.compress, InUse: l.inUse, Since: l.since,
		SocketConnects: l.connects, Reconnects: max(l.connects-1, 0), Fallbacks: l.fallbacks, TokenExpires: l.tokenExpires}
}

// watchCloud returns c, telling l of the tokens issued, the heartbeats sent
// and the sockets opened; it is a SocketCloud when c is one.
func watchCloud(c Cloud, l *link) Cloud {
	if c == nil {
		return nil
	}
	w := watchedCloud{Cloud: c, link: l}
	if sc, ok := c.(SocketCloud); ok {
		return watchedSocketCloud{watchedCloud: w, sc: sc}
	}
	return w
}

type watchedCloud struct {
	Cloud
	link *link
}

func (c watchedCloud) Token(ctx context.Context, req shared.TokenRequest) (shared.TokenResponse, error) {
	resp, err := c.Cloud.Token(ctx, req)
	if err == nil {
		c.link.token(resp, c.link.now())
	}
	return resp, err
}

func (c watchedCloud) Heartbeat(ctx context.Context, token string, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	c.link.use(TransportHeartbeat)
	return c.Cloud.Heartbeat(ctx, token, req)
}

type watchedSocketCloud struct {
	watchedCloud
	sc SocketCloud
}

func (c watchedSocketCloud) DialSocket(ctx context.Context, token string) (*cloudapi.Socket, error) {
	sock, err := c.sc.DialSocket(ctx, token)
	if err != nil {
		c.link.socketFailed()
		return nil, err
	}
	c.link.socketOpened()
	return sock, nil
}

// snapshot returns how many webhooks wait for a worker, the handlers
// running (oldest first) and each source's work.
func (p *pool) snapshot() (queued int, running []RunningWebhook, sources []SourceLoad) {
	p.mu.Lock()
	defer p.mu.Unlock()
	running = make([]RunningWebhook, 0, len(p.runs))
	for _, r := range p.runs {
		running = append(running, r)
	}
	slices.SortFunc(running, func(a, b RunningWebhook) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.DeliveryID, b.DeliveryID)
	})
	for name, ln := range p.lanes {
		sources = append(sources, SourceLoad{Source: name, Running: ln.running, Waiting: len(ln.queue)})
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Source < sources[j].Source })
	return p.queued, running, sources
}
