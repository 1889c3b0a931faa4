package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/shared"
)

// socketConn is one connection's state.
type socketConn struct {
	t    *socketTransport
	sock *cloudapi.Socket
	// received is how many webhooks came on this connection, limit the
	// push limit last granted (received + credit).
	received, limit int64
	reportID        int64
	pending         *pendingReport // the report awaiting its confirm
	saidStopping    bool           // a report said the host is stopping
	cleanup         chan struct{}  // closed once the last confirmed report left the outbox
	// The reader's frames and its error; stopReading ends it.
	frames      chan *shared.Frame
	readErr     chan error
	stopReading context.CancelFunc
}

// errParked: ctx ended and the socket stays open for Flush.
var errParked = errors.New("socket parked for the last report")

type pendingReport struct {
	id      int64
	seqs    []int64
	extends []string
	sentAt  time.Time
	sub     []byte // the subscription it carried, if any
}

// flush sends reports until the outbox is empty, each confirmed and
// deleted before the next, and returns how many outcomes went.
func (sc *socketConn) flush(ctx context.Context) (int, error) {
	n := 0
	for {
		if sc.pending == nil {
			sc.awaitCleanup()
			if err := sc.report(ctx); err != nil {
				return n, err
			}
			if sc.pending == nil {
				return n, nil // nothing left to report
			}
			n += len(sc.pending.seqs)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case err := <-sc.readErr:
			return n, sc.closed(err)
		case f := <-sc.frames:
			if err := sc.apply(f); err != nil {
				return n, err
			}
		}
	}
}

// hello says what the host holds and how much it takes, with the
// subscription, and waits for the welcome.
func (sc *socketConn) hello(ctx context.Context) error {
	a := sc.t.a
	c := a.flow.credit(sc.t.clock.Now(), true)
	held := c.held
	// What ran and waits in the outbox is held too: its outcome goes in the
	// first report, and the cloud must not take it for lost meanwhile.
	lctx, cancel := context.WithTimeout(ctx, ledgerTimeout)
	outbox, err := a.rec.outbox(lctx, socketMaxHeld)
	cancel()
	if err != nil {
		return err
	}
	for _, ob := range outbox {
		if len(held) >= socketMaxHeld {
			break
		}
		held = append(held, ob.DeliveryID)
	}
	sub := a.subscription()
	f := &shared.Frame{Type: shared.FrameHello, AgentVersion: Version, RawBodyOnly: true, BinaryWebhooks: true, Held: held}
	if sub != nil {
		f.Config = &shared.Subscription{}
		if err := json.Unmarshal(sub, f.Config); err != nil {
			return fmt.Errorf("subscription: %w", err)
		}
	}
	f.Credit = sc.room(c)
	if err := sc.sock.Write(f); err != nil {
		return err
	}
	sc.limit = int64(f.Credit)
	wctx, cancel := context.WithTimeout(ctx, socketDialTimeout)
	defer cancel()
	w, err := sc.sock.Read(wctx)
	if err != nil {
		sc.sock.CloseBroken(err)
		return fmt.Errorf("socket welcome: %w", err)
	}
	if w.Type != shared.FrameWelcome {
		return fmt.Errorf("socket: expected welcome, got %q", w.Type)
	}
	// The cloud's time and lease, as a heartbeat's answer gives them.
	a.cloudTime.observe(sc.t.clock.Now(), w.Now)
	a.flow.setLease(time.Duration(w.LeaseS) * time.Second)
	sc.t.subSent = sub
	return nil
}

// room is the credit to grant: the room in the lease window, none while the
// ledger cannot record or the host stops.
func (sc *socketConn) room(c credit) int {
	a := sc.t.a
	if a.rec.paused() || a.Stopping() {
		return 0
	}
	return min(max(c.free, 0), shared.MaxSocketCredit)
}

// serve runs the connection until it fails or ctx is done (then it closes
// the socket and returns nil).
func (sc *socketConn) serve(ctx context.Context) error {
	t, a := sc.t, sc.t.a
	frames := make(chan *shared.Frame, 16)
	readErr := make(chan error, 1)
	readCtx, stopReading := context.WithCancel(context.Background())
	sc.frames, sc.readErr, sc.stopReading = frames, readErr, stopReading
	go func() {
		for {
			f, err := sc.sock.Read(readCtx)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- f:
			case <-readCtx.Done():
				return
			}
		}
	}()
	pingErr := make(chan error, 1)
	pinging := false
	// The host pings at its heartbeat interval (at most SocketPingEvery):
	// each pong is a contact, as a heartbeat is, for its health report.
	pingTick := t.clock.NewTicker(min(shared.SocketPingEvery, t.hb.interval))
	defer pingTick.Stop()
	extendTick := t.clock.NewTicker(a.flow.renewPeriod())
	defer extendTick.Stop()
	refresh := t.clock.NewTimer(max(t.tokens.renewAt().Sub(t.clock.Now()), time.Second))
	defer refresh.Stop()
	// While webhooks run, outcomes wait up to reportDelay to go out
	// together: a report per outcome costs the ledger a delete each.
	var reportDue clockwork.Timer
	defer func() {
		if reportDue != nil {
			reportDue.Stop()
		}
	}()

	if err := sc.report(ctx); err != nil {
		return err
	}
	for {
		var cleaned <-chan struct{}
		if sc.cleanup != nil {
			cleaned = sc.cleanup
		}
		var due <-chan time.Time
		if reportDue != nil {
			due = reportDue.Chan()
		}
		var err error
		select {
		case <-ctx.Done():
			// Left open: the last outcomes go over it (Flush).
			return errParked
		case err = <-readErr:
			return sc.closed(err)
		case err = <-pingErr:
			pinging = false
			if err != nil {
				return fmt.Errorf("socket ping: %w", err)
			}
			a.contacted(t.clock.Now(), nil)
		case f := <-frames:
			err = sc.apply(f)
		case <-a.wake:
			switch {
			case a.flow.count() == 0:
				// The last outcome: report it now.
				err = sc.report(ctx)
			case reportDue == nil:
				reportDue = t.clock.NewTimer(reportDelay)
			}
		case <-due:
			reportDue = nil
			err = sc.report(ctx)
		case <-cleaned:
			sc.cleanup = nil
			err = sc.report(ctx)
		case <-extendTick.Chan():
			err = sc.report(ctx)
		case <-refresh.Chan():
			err = sc.refreshToken(ctx)
			refresh.Reset(max(t.tokens.renewAt().Sub(t.clock.Now()), time.Second))
		case <-pingTick.Chan():
			if !pinging {
				pinging = true
				go func() {
					pctx, cancel := context.WithTimeout(context.Background(), socketPingTimeout)
					defer cancel()
					pingErr <- sc.sock.Ping(pctx)
				}()
			}
		}
		if err == nil {
			err = sc.grant()
		}
		if err != nil && ctx.Err() != nil {
			// The stop came as this case ran: the socket is left open all
			// the same, for the last reports (Flush), which hand back what
			// it pushed; closed here, that would be lost with it. One that
			// really failed fails Flush, which then heartbeats.
			return errParked
		}
		if err != nil {
			return err
		}
	}
}

// closed says why the cloud ended the socket; a token it refused is
// fetched afresh on the next connection.
func (sc *socketConn) closed(err error) error {
	if sc.sock.CloseBroken(err) {
		return err
	}
	switch cloudapi.CloseCode(err) {
	case shared.CloseUnauthorized, shared.CloseTokenExpired, shared.CloseRevoked:
		sc.t.tokens.Invalidate()
	}
	return fmt.Errorf("socket closed: %w", err)
}

// apply takes a frame of the cloud.
func (sc *socketConn) apply(f *shared.Frame) error {
	t, a := sc.t, sc.t.a
	switch f.Type {
	case shared.FrameWebhooks:
		sc.received += int64(len(f.Webhooks))
		if sc.received > sc.limit {
			err := &cloudapi.FrameError{Reason: fmt.Sprintf("pushed %d webhooks, %d were granted", sc.received, sc.limit)}
			sc.sock.CloseBroken(err)
			return err
		}
		// The cloud used all the credit: lease further ahead while the
		// workers run dry.
		full := sc.received == sc.limit
		a.flow.adjust(full, a.pool.ranDry(), full)
		a.pool.markDry()
		// Once the host stops, what was granted before is handed back in
		// the last reports (take).
		t.log.Debug("webhooks pushed", "count", len(f.Webhooks))
		a.take(f.Webhooks)
	case shared.FrameConfirm:
		a.cloudTime.observe(t.clock.Now(), f.Now)
		p := sc.pending
		if p == nil || f.ID != p.id {
			return fmt.Errorf("socket: confirm of report %d, none such awaited", f.ID)
		}
		sc.pending = nil
		a.flow.extended(p.extends, p.sentAt)
		if p.sub != nil {
			t.subSent = p.sub
			t.log.Info("subscription sent to the cloud")
		}
		if len(p.seqs) > 0 {
			done := make(chan struct{})
			sc.cleanup = done
			go func() {
				defer close(done)
				if err := a.rec.reported(p.seqs); err != nil {
					// Reported again with the next report: a repeated ack
					// is harmless.
					t.log.Error("outbox cleanup failed", "err", err)
				}
			}()
		}
	default:
		t.log.Debug("socket frame ignored", "type", f.Type)
	}
	return nil
}

// grant sends more credit when the window has room the cloud was not told
// of: a quarter of the window at least, or any once nothing is in flight.
// Granting each freed slot at once would have a draining cloud push (and
// lease, and mark delivered) one webhook a frame.
func (sc *socketConn) grant() error {
	a := sc.t.a
	c := a.flow.room()
	limit := sc.received + int64(sc.room(c))
	gain := limit - sc.limit
	if gain <= 0 || (gain < int64(max(1, a.flow.windowSize()/4)) && !c.idle) {
		return nil
	}
	if err := sc.sock.Write(&shared.Frame{Type: shared.FrameCredit, Received: sc.received, Credit: int(limit - sc.received)}); err != nil {
		return err
	}
	sc.limit = limit
	return nil
}

// report sends the outbox's acks and nacks, the extends due and a changed
// subscription, unless a report awaits its confirm.
func (sc *socketConn) report(ctx context.Context) error {
	t, a := sc.t, sc.t.a
	if sc.pending != nil || sc.cleanup != nil {
		return nil // the confirm, or the cleanup, reports again
	}
	now := t.clock.Now()
	c := a.flow.credit(now, false)
	extends := c.extends[:min(len(c.extends), socketMaxExtends)]
	sub := a.subscription()
	sendSub := sub != nil && !slices.Equal(sub, t.subSent)
	// Read even as the host stops: the report still goes.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ledgerTimeout)
	defer cancel()
	outbox, err := a.rec.outbox(lctx, socketMaxOutcomes)
	if err != nil {
		return err
	}
	// The first report once the host stops says so, even with nothing in
	// it: the cloud pushes nothing after it, and what it pushed before
	// arrives ahead of its confirm, to be handed back (flush).
	stopping := a.Stopping() && !sc.saidStopping
	if len(outbox) == 0 && len(extends) == 0 && !sendSub && !stopping {
		return nil
	}
	sc.reportID++
	f := &shared.Frame{Type: shared.FrameReport, ID: sc.reportID, Extends: extends, Stopping: stopping}
	p := &pendingReport{id: sc.reportID, extends: extends, sentAt: now}
	rep := reportOutbox(outbox)
	f.Acks, f.Nacks, f.Results = rep.acks, rep.nacks, rep.results
	p.seqs = rep.seqs
	if sendSub {
		f.Config = &shared.Subscription{}
		if err := json.Unmarshal(sub, f.Config); err != nil {
			return fmt.Errorf("subscription: %w", err)
		}
		p.sub = sub
	}
	if err := sc.sock.Write(f); err != nil {
		return err
	}
	sc.saidStopping = sc.saidStopping || stopping
	sc.pending = p
	t.log.Debug("report sent", "acks", len(f.Acks), "nacks", len(f.Nacks), "extends", len(f.Extends))
	return nil
}

// refreshToken sends the token the host would use now, fresh once 80 % of
// the last one's life passed.
func (sc *socketConn) refreshToken(ctx context.Context) error {
	token, err := sc.t.tokens.Token(ctx)
	if err != nil {
		return err
	}
	return sc.sock.Write(&shared.Frame{Type: shared.FrameToken, Token: token})
}

// awaitCleanup waits for the last confirmed report's outbox cleanup.
func (sc *socketConn) awaitCleanup() {
	if sc.cleanup != nil {
		<-sc.cleanup
		sc.cleanup = nil
	}
}
