package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// socketSession is one host's socket.
type socketSession struct {
	s      *Transports
	conn   *websocket.Conn
	host   *store.Host
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once what it pushed is released
	// outbox holds the host's credit and what the intake leased to this
	// socket as it was stored.
	outbox *delivery.Outbox
	// marker marks what was written delivered, off the push loop; reports
	// and the release wait for it.
	marker *delivery.Marker

	rawBodyOnly bool
	// binary: the host reads webhooks frames as binary messages.
	binary bool
	// deflate: the upgrade agreed to permessage-deflate (deflateAgreed).
	deflate bool

	mu         sync.Mutex
	unreported map[string]bool // pushed, neither acked nor nacked
	expires    time.Time       // the last accepted token's expiry
	closeOnce  sync.Once
	doneOnce   sync.Once
}

// released says that what the session pushed is released (done).
func (ss *socketSession) released() { ss.doneOnce.Do(func() { close(ss.done) }) }

// closeError is why a session ends, as a close frame.
type closeError struct {
	code   websocket.StatusCode
	reason string
}

func (e *closeError) Error() string { return fmt.Sprintf("socket closed %d: %s", e.code, e.reason) }

// close ends the session with code and reason.
func (ss *socketSession) close(code websocket.StatusCode, reason string) {
	ss.cancel(&closeError{code: code, reason: reason})
}

func (ss *socketSession) serve(ctx context.Context) {
	s, host := ss.s, ss.host
	// The host's older socket, here or on another replica, is closed and
	// has released what it pushed before this one says hello.
	conn, err := s.conns.Open(ctx, host.ID, func() {
		ss.close(shared.CloseReplaced, "replaced by a newer socket of this host")
	}, ss.done)
	defer s.conns.Close(conn)
	defer ss.release()
	if err != nil {
		switch {
		case ctx.Err() != nil: // replaced meanwhile
			ss.finish(context.Cause(ctx))
		case errors.Is(err, delivery.ErrReplaced):
			ss.finish(&closeError{code: shared.CloseReplaced, reason: "replaced by a newer socket of this host"})
		default:
			ss.finish(unavailable(err))
		}
		return
	}
	if err := ss.hello(ctx); err != nil {
		ss.finish(err)
		return
	}
	// From now on the intake may lease to it as it stores.
	s.conns.Attach(conn, ss.outbox)
	// An idle socket holds two goroutines, this one (pushing) and its
	// reader; pings and the token's expiry are timers.
	read := make(chan struct{})
	go func() { defer close(read); ss.readLoop(ctx) }()
	stopTimers := ss.keepAlive(ctx)
	ss.pushLoop(ctx)
	<-ctx.Done()
	stopTimers()
	if ce := (*closeError)(nil); errors.As(context.Cause(ctx), &ce) && ce.code == shared.CloseReplaced {
		// The host went to a newer socket; this one may be half-open, and
		// the close handshake waits for an answer (5 s at most). What it
		// pushed is released first, so that the newer socket need not wait
		// for that: a report still arriving is applied all the same.
		ss.release()
		s.conns.Close(conn)
		ss.released()
	}
	ss.finish(context.Cause(ctx))
	<-read
	s.log.Debug("socket closed", "host", host.ID, "cause", context.Cause(ctx))
}

// finish closes the connection as err says.
func (ss *socketSession) finish(err error) {
	ss.closeOnce.Do(func() {
		var ce *closeError
		switch {
		case errors.As(err, &ce):
			if ce.code == websocket.StatusInternalError {
				ss.s.log.Warn("socket closed", "host", ss.host.ID, "reason", ce.reason)
			}
			// Close waits for the host's close frame, a few seconds at
			// most.
			_ = ss.conn.Close(ce.code, ce.reason)
		default:
			_ = ss.conn.CloseNow()
		}
	})
}

// release fails the attempt of what was pushed and not reported, and of
// what the intake leased to the socket and it never pushed: due again at
// once (delivery.ConnectionLost).
func (ss *socketSession) release() {
	// No more is leased to it; an insert holding room ends first.
	ids := ss.outbox.Close()
	ss.marker.Flush()
	ss.mu.Lock()
	for id := range ss.unreported {
		ids = append(ids, id)
	}
	ss.unreported = map[string]bool{}
	ss.mu.Unlock()
	if _, err := ss.s.deliveries.ConnectionLost(context.Background(), ss.host.ID, ids); err != nil {
		ss.s.log.Warn("release deliveries of a closed socket; their leases will end", "host", ss.host.ID, "deliveries", len(ids), "err", err)
	}
}

// hello reads the host's hello, records the host and releases what it lost,
// then welcomes it.
func (ss *socketSession) hello(ctx context.Context) error {
	// Reads and writes do not end with ctx: coder/websocket drops a
	// connection whose read or write is canceled, and the close frame
	// saying why would be lost.
	hctx, cancel := context.WithTimeout(context.Background(), socketHelloTimeout)
	defer cancel()
	f, err := ss.read(hctx)
	if err != nil {
		return err
	}
	if f.Type != shared.FrameHello {
		return protocolError("the first frame must be hello, got %q", f.Type)
	}
	if err := ss.grant(f.Received, f.Credit); err != nil {
		return err
	}
	ss.rawBodyOnly = f.RawBodyOnly
	ss.binary = f.BinaryWebhooks
	beat := delivery.Beat{AgentVersion: shared.Truncate(f.AgentVersion, 100)}
	if f.Config != nil {
		if beat.Subscription, err = json.Marshal(f.Config); err != nil {
			return protocolError("config: %v", err)
		}
	}
	if err := ss.s.deliveries.Record(ctx, ss.host, beat); err != nil {
		return unavailable(err)
	}
	// What is leased to the host and not held went with whatever carried it.
	if _, err := ss.s.deliveries.Report(ctx, ss.host.ID, &delivery.Report{AnswerLost: true, Held: f.Held}); err != nil {
		return unavailable(err)
	}
	return ss.write(ctx, &shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: ss.s.IntervalS(), MaxCredit: shared.MaxSocketCredit,
		Now: ss.s.deliveries.Now(), LeaseS: int(ss.s.deliveries.LeaseFor() / time.Second)})
}

func protocolError(format string, args ...any) error {
	return &closeError{code: shared.CloseProtocol, reason: shared.Truncate(fmt.Sprintf(format, args...), 120)}
}

func unavailable(err error) error {
	return &closeError{code: websocket.StatusInternalError, reason: "storage unavailable: " + shared.Truncate(err.Error(), 80)}
}

// grant applies a credit (delivery.Outbox.Grant).
func (ss *socketSession) grant(received int64, credit int) error {
	if err := ss.outbox.Grant(received, credit); err != nil {
		return protocolError("%v", err)
	}
	return nil
}

func (ss *socketSession) read(ctx context.Context) (*shared.Frame, error) {
	typ, data, err := ss.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, protocolError("frames are JSON text messages")
	}
	var f shared.Frame
	if err := shared.UnmarshalFrame(data, &f); err != nil {
		return nil, protocolError("malformed frame: %s", shared.DescribeJSONError(err))
	}
	if err := f.Validate(); err != nil {
		return nil, protocolError("%v", err)
	}
	return &f, nil
}

func (ss *socketSession) write(ctx context.Context, f *shared.Frame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), socketWriteTimeout)
	defer cancel()
	return ss.conn.Write(wctx, websocket.MessageText, data)
}

// frameBuffers are the buffers binary webhooks frames and heartbeat
// answers are encoded in, shared by the sockets and the long polls: most
// of them idle, and a buffer each would hold a batch's bytes per host.
var frameBuffers sync.Pool

// maxPooledFrame bounds a buffer kept for the next frame: a batch's bodies
// (the store hands out up to 4 MiB) with their JSON.
const maxPooledFrame = 8 << 20

// frameBuffer is an empty buffer from frameBuffers (nil when it has none).
func frameBuffer() []byte {
	if p, ok := frameBuffers.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// keepFrameBuffer gives data's buffer back to frameBuffers once written,
// unless it grew past maxPooledFrame.
func keepFrameBuffer(data []byte) {
	if cap(data) <= maxPooledFrame {
		frameBuffers.Put(&data)
	}
}

// writeBinary writes hooks as a binary webhooks frame
// (shared.AppendWebhooksFrame): each body is copied once, into the frame.
func (ss *socketSession) writeBinary(ctx context.Context, hooks []shared.Webhook) error {
	data, err := shared.AppendWebhooksFrame(frameBuffer(), hooks)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), socketWriteTimeout)
	defer cancel()
	err = ss.conn.Write(wctx, websocket.MessageBinary, data)
	keepFrameBuffer(data)
	return err
}

// readLoop applies the host's frames until the socket ends (closing the
// connection ends its read).
func (ss *socketSession) readLoop(ctx context.Context) {
	for {
		f, err := ss.read(context.WithoutCancel(ctx))
		if err == nil {
			err = ss.apply(ctx, f)
		}
		if err != nil {
			ss.cancel(err)
			return
		}
	}
}

func (ss *socketSession) apply(ctx context.Context, f *shared.Frame) error {
	switch f.Type {
	case shared.FrameCredit:
		return ss.grant(f.Received, f.Credit)
	case shared.FrameReport:
		return ss.report(ctx, f)
	case shared.FrameToken:
		return ss.token(f.Token)
	default:
		return protocolError("unexpected %q frame", f.Type)
	}
}

// report applies acks, nacks and extends durably, then confirms them (read
// checked the report: shared.Frame.Validate).
func (ss *socketSession) report(ctx context.Context, f *shared.Frame) error {
	r := &delivery.Report{Acks: f.Acks, Extends: f.Extends, Stopping: f.Stopping}
	for _, n := range f.Nacks {
		r.Nacks = append(r.Nacks, fromWireNack(n))
	}
	for _, res := range f.Results {
		r.Results = append(r.Results, fromWireResult(res))
	}
	if f.Config != nil || f.AgentVersion != "" {
		beat := delivery.Beat{AgentVersion: shared.Truncate(f.AgentVersion, 100)}
		if beat.AgentVersion == "" {
			beat.AgentVersion = ss.host.AgentVersion
		}
		if f.Config != nil {
			sub, err := json.Marshal(f.Config)
			if err != nil {
				return protocolError("config: %v", err)
			}
			beat.Subscription = sub
		}
		if err := ss.s.deliveries.Record(ctx, ss.host, beat); err != nil {
			return unavailable(err)
		}
	}
	// What the report acks and was not marked delivered yet, its ack
	// records delivered; the rest of what it moves on is marked first.
	others := slices.Clone(f.Extends)
	for _, n := range f.Nacks {
		others = append(others, n.DeliveryID)
	}
	r.Unmarked = ss.marker.Take(f.Acks, others)
	if r.HostStops() {
		ss.outbox.HandingBack() // before what it hands back comes due
	}
	if _, err := ss.s.deliveries.Report(ctx, ss.host.ID, r); err != nil {
		ss.marker.Restore(r.Unmarked)
		return unavailable(err)
	}
	ss.mu.Lock()
	for _, id := range f.Acks {
		delete(ss.unreported, id)
	}
	for _, n := range f.Nacks {
		delete(ss.unreported, n.DeliveryID)
	}
	ss.mu.Unlock()
	if len(f.Nacks) > 0 {
		// A retry may now come due before the one the pusher waits for.
		ss.outbox.Poke()
	}
	return ss.write(ctx, &shared.Frame{Type: shared.FrameConfirm, ID: f.ID, Now: ss.s.deliveries.Now()})
}

// token accepts a fresh token of the same host and generation: the socket
// lives on until it expires.
func (ss *socketSession) token(tok string) error {
	claims, err := ss.s.tokens.Verify(tok)
	if err != nil || claims.Subject != ss.host.ID || claims.Generation != ss.host.Generation || claims.ExpiresAt == nil {
		return &closeError{code: shared.CloseUnauthorized, reason: "token refused"}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if claims.ExpiresAt.Time.After(ss.expires) {
		ss.expires = claims.ExpiresAt.Time
	}
	return nil
}

// keepAlive pings the host every SocketPingEvery, recording the contact
// (delivery.Service.Record) every SocketContactEvery at most, and closes the socket when the host does not
// answer and when its last token expires; it returns what stops it. The
// cloud stopping ends the push loop (delivery.ErrStopping).
func (ss *socketSession) keepAlive(ctx context.Context) (stop func()) {
	s := ss.s
	var mu sync.Mutex // the timers, set below and reset by their own funcs
	var ping, expiry clockwork.Timer
	recorded := s.clock.Now() // the hello recorded the contact
	mu.Lock()
	defer mu.Unlock()
	ping = s.clock.AfterFunc(shared.SocketPingEvery, func() {
		if ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), socketPingTimeout)
		err := ss.conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				ss.cancel(fmt.Errorf("ping: %w", err))
			}
			return
		}
		if now := s.clock.Now(); now.Sub(recorded) >= SocketContactEvery {
			if err := s.deliveries.Record(ctx, ss.host, delivery.Beat{AgentVersion: ss.host.AgentVersion}); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("record socket contact", "host", ss.host.ID, "err", err)
				}
			} else {
				recorded = now
			}
		}
		mu.Lock()
		defer mu.Unlock()
		ping.Reset(shared.SocketPingEvery)
	})
	var expire func()
	expire = func() {
		ss.mu.Lock()
		left := ss.expires.Sub(s.clock.Now())
		ss.mu.Unlock()
		if left <= 0 {
			ss.close(shared.CloseTokenExpired, "token expired")
			return
		}
		// A token frame moved it.
		mu.Lock()
		defer mu.Unlock()
		if expiry == nil {
			expiry = s.clock.AfterFunc(left, expire)
		} else {
			expiry.Reset(left)
		}
	}
	ss.mu.Lock()
	left := ss.expires.Sub(s.clock.Now())
	ss.mu.Unlock()
	expiry = s.clock.AfterFunc(max(left, 0), expire)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		ping.Stop()
		expiry.Stop()
	}
}

// pushLoop pushes the host's deliveries as they come, within its credit.
func (ss *socketSession) pushLoop(ctx context.Context) {
	s := ss.s
	for {
		res, err := s.deliveries.NextPush(ctx, ss.host, ss.outbox)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, delivery.ErrHostGone):
			ss.close(shared.CloseRevoked, "host deactivated or re-claimed")
			return
		case errors.Is(err, delivery.ErrStopping):
			ss.close(websocket.StatusGoingAway, "cloud stopping")
			return
		case err != nil:
			ss.cancel(unavailable(err))
			return
		}
		f := &shared.Frame{Type: shared.FrameWebhooks, Webhooks: make([]shared.Webhook, 0, len(res.Deliveries))}
		ids := make([]string, 0, len(res.Deliveries))
		for _, d := range res.Deliveries {
			ids = append(ids, d.ID)
			steptime.Stamp(d.Headers, "encoded", time.Now())
			f.Webhooks = append(f.Webhooks, toWire(d, !ss.rawBodyOnly))
		}
		var release func()
		written := ss.outbox.Push(func() {
			ss.mu.Lock()
			for _, id := range ids {
				ss.unreported[id] = true
			}
			ss.mu.Unlock()
			release = s.holdOutgoing(res.Deliveries)
			// Put down as written before the write: the host may report
			// them before this loop goes on.
			ss.marker.Add(ids)
			if ss.binary {
				err = ss.writeBinary(ctx, f.Webhooks)
			} else {
				err = ss.write(ctx, f)
			}
		})
		if !written {
			// Leased as the host handed back what it held: it is
			// stopping, so they are given back unwritten.
			s.deliveries.HandBackUnpushed(ctx, ss.host.ID, ids)
			continue
		}
		release()
		// Written, they are delivered (marked while the loop goes on); not,
		// due again at once.
		if err == nil {
			s.metrics.Wrote(TransportSocket, ss.encoding(), len(ids))
		} else {
			ss.marker.Drop(ids)
			s.deliveries.RecordWrite(ctx, ss.host.ID, ids, err)
		}
		if err != nil {
			ss.mu.Lock()
			for _, id := range ids {
				delete(ss.unreported, id)
			}
			ss.mu.Unlock()
			ss.cancel(fmt.Errorf("write webhooks: %w", err))
			return
		}
	}
}

// encoding is how the session's webhooks frames go on the wire, a label
// of relay_webhooks_sent_total.
func (ss *socketSession) encoding() string {
	switch {
	case ss.binary && ss.deflate:
		return encodingBinary + deflateSuffix
	case ss.binary:
		return encodingBinary
	case ss.deflate:
		return encodingJSON + deflateSuffix
	default:
		return encodingJSON
	}
}
