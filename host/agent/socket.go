package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/cloudapi"
)

// Transports, the values of Options.Transport.
const (
	TransportAuto      = "auto"      // the socket, heartbeats while it cannot connect
	TransportWebSocket = "websocket" // the socket only
	TransportHeartbeat = "heartbeat" // heartbeats only (the default)
)

// SocketCloud is a Cloud that can open the socket (a *cloudapi.Client).
// DialSocket's errors carry the cloud's HTTP status as cloudapi.StatusOf
// reads it when the cloud refused the upgrade.
type SocketCloud interface {
	DialSocket(ctx context.Context, token string) (*cloudapi.Socket, error)
}

// newTransport is the transport opts ask for: heartbeats unless the cloud
// can open a socket and the socket is asked for.
func newTransport(a *Agent, opts Options) Transport {
	hb := newHeartbeats(a, opts)
	sc, ok := opts.Cloud.(SocketCloud)
	if !ok || (opts.Transport != TransportAuto && opts.Transport != TransportWebSocket) {
		return hb
	}
	return &socketTransport{
		a: a, cloud: sc, hb: hb, tokens: a.tokens, fallback: opts.Transport == TransportAuto,
		maxBackoff: opts.MaxBackoff, clock: opts.Clock, log: opts.Logger,
	}
}

// Timing of the socket transport.
const (
	socketDialTimeout = 10 * time.Second // upgrade and welcome
	socketPingTimeout = 15 * time.Second
	// socketStable is how long a socket must have lived for its loss to
	// count as a blip (connect again at once) rather than a failure (back
	// off, on heartbeats when falling back).
	socketStable = 10 * time.Second
	// socketRetryFirst and socketRetryMax bound the wait before the socket
	// is tried again after it failed; a host falling back heartbeats
	// meanwhile.
	socketRetryFirst = 2 * time.Second
	socketRetryMax   = 5 * time.Minute
	// reportDelay is how long an outcome may wait for others to go in the
	// same report while webhooks still run.
	reportDelay = 100 * time.Millisecond
	// socketMaxHeld bounds the webhooks a hello says the host holds, and
	// socketMaxOutcomes and socketMaxExtends what one report lists: within
	// shared.MaxReportItems, and within the 1,000 ids a cloud took in a
	// hello or a report before that bound was the heartbeat's too.
	socketMaxHeld     = 1000
	socketMaxOutcomes = socketMaxHeld / 2
	socketMaxExtends  = socketMaxHeld / 2
)

// socketTransport keeps a socket to the cloud, which pushes webhooks within
// the credit the host grants (shared/socket.go). When falling back, it
// heartbeats while the socket cannot connect and tries it again with
// backoff; without, it retries the socket alone. The last exchange of a
// stopping host (Flush) is a heartbeat.
type socketTransport struct {
	a          *Agent
	cloud      SocketCloud
	hb         *heartbeats
	tokens     *tokenSource
	fallback   bool
	maxBackoff time.Duration
	clock      clockwork.Clock
	log        *slog.Logger

	// Only Run's goroutine, then Flush, use the fields below.
	subSent []byte // the subscription the cloud last accepted over a socket
	// parked is the socket Run left open when ctx ended: the stopping
	// host's last outcomes go over it (Flush) before it closes, so the
	// cloud does not take the closing for a loss.
	parked *socketConn
}

// Run keeps a socket until ctx is done or the cloud refuses the host's
// credential.
func (t *socketTransport) Run(ctx context.Context) error {
	first, most := socketRetryFirst, socketRetryMax
	if !t.fallback {
		first, most = firstRetry, t.maxBackoff
	}
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(most),
		backoff.WithMaxElapsedTime(0),
	)
	for ctx.Err() == nil {
		start := t.clock.Now()
		connected, err := t.session(ctx)
		if errors.Is(err, ErrRevoked) {
			t.hb.awaitCleanup()
			return err
		}
		if ctx.Err() != nil {
			break
		}
		if connected {
			t.hb.cloudReached()
		}
		if connected && t.clock.Since(start) >= socketStable {
			bo.Reset()
			t.log.Info("socket lost; connecting again", "err", err)
			continue
		}
		delay := min(bo.NextBackOff(), most)
		if !t.fallback {
			t.log.Warn("socket failed", "err", err, "retry_in", delay)
			t.hb.sleep(ctx, t.clock.Now().Add(delay), t.clock.Now().Add(delay), false)
			continue
		}
		t.log.Warn("socket unavailable; heartbeats meanwhile", "err", err, "socket_retry_in", delay)
		// What a socket pushed and the host does not hold is due again at
		// once: the first heartbeat says what the host holds.
		t.hb.answerLost = true
		// Not a context deadline: the heartbeat's own deadlines derive
		// from ctx and must not end with the fallback.
		hctx, cancel := context.WithCancel(ctx)
		retry := t.clock.AfterFunc(delay, cancel)
		err = t.hb.Run(hctx)
		retry.Stop()
		cancel()
		t.hb.awaitCleanup()
		if errors.Is(err, ErrRevoked) {
			return err
		}
	}
	t.hb.awaitCleanup()
	return nil
}

// Flush reports the outbox over the socket Run left open, then closes it;
// without one (or should it fail), with a last heartbeat.
func (t *socketTransport) Flush(ctx context.Context) (int, error) {
	sc := t.parked
	t.parked = nil
	if sc == nil {
		return t.hb.Flush(ctx)
	}
	defer sc.sock.CloseNow()
	defer sc.stopReading()
	n, err := sc.flush(ctx)
	if err != nil {
		t.log.Warn("last report over the socket failed; sending it by heartbeat", "err", err)
		m, err := t.hb.Flush(ctx)
		return n + m, err
	}
	_ = sc.sock.Close("host stopped")
	return n, nil
}

// session connects and serves one socket until it ends; connected says
// whether the cloud welcomed it.
func (t *socketTransport) session(ctx context.Context) (connected bool, err error) {
	sock, err := t.dial(ctx)
	t.a.contacted(t.clock.Now(), err)
	if err != nil {
		return false, err
	}
	sc := &socketConn{t: t, sock: sock}
	defer func() {
		if t.parked != sc {
			sock.CloseNow()
		}
	}()
	if err := sc.hello(ctx); err != nil {
		t.a.contacted(t.clock.Now(), err)
		return false, err
	}
	t.a.contacted(t.clock.Now(), nil)
	t.log.Info("socket connected")
	err = sc.serve(ctx)
	sc.awaitCleanup()
	if errors.Is(err, errParked) {
		t.parked = sc
		return true, nil
	}
	sc.stopReading()
	if err != nil {
		t.a.contacted(t.clock.Now(), err)
	}
	return true, err
}

// dial opens the socket, fetching a fresh token once if the cloud answers
// 401.
func (t *socketTransport) dial(ctx context.Context) (*cloudapi.Socket, error) {
	token, err := t.tokens.Token(ctx)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, socketDialTimeout)
	defer cancel()
	sock, err := t.cloud.DialSocket(dctx, token)
	if cloudapi.StatusOf(err) == http.StatusUnauthorized {
		t.tokens.Invalidate()
		if token, err = t.tokens.Token(ctx); err != nil {
			return nil, err
		}
		sock, err = t.cloud.DialSocket(dctx, token)
	}
	if cloudapi.StatusOf(err) == http.StatusGone {
		return nil, fmt.Errorf("%w: %v", ErrRevoked, err)
	}
	return sock, err
}
