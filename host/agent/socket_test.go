package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/shared"
)

// fakeSocket plays the cloud's end of the socket (a process edge): the
// test reads what the host sends and writes what the cloud would.
type fakeSocket struct {
	t      *testing.T
	cloud  *fakeCloud
	refuse atomic.Bool // answer upgrades 400, as a proxy that strips Upgrade
	// confirming: the test is over; reports are confirmed here, so that
	// the stopping host's last one is.
	confirming atomic.Bool
	conns      chan *cloudEnd
}

// cloudEnd is one accepted socket.
type cloudEnd struct {
	t      *testing.T
	conn   *websocket.Conn
	frames chan *shared.Frame // what the host sent
	closed chan error
	credit *shared.Frame // the last credit next passed over
}

func (fs *fakeSocket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != shared.PathSocket {
		fs.cloud.ServeHTTP(w, r)
		return
	}
	if fs.refuse.Load() {
		http.Error(w, "no upgrades here", http.StatusBadRequest)
		return
	}
	fs.cloud.mu.Lock()
	valid := r.Header.Get("Authorization") == "Bearer "+fs.cloud.validToken
	fs.cloud.mu.Unlock()
	if !valid {
		writeJSON(w, r, http.StatusUnauthorized, shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeUnauthorized, Message: "bad token"}})
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ce := &cloudEnd{t: fs.t, conn: conn, frames: make(chan *shared.Frame, 100), closed: make(chan error, 1)}
	fs.conns <- ce
	for {
		_, data, err := conn.Read(context.Background())
		if err != nil {
			ce.closed <- err
			return
		}
		var f shared.Frame
		if err := json.Unmarshal(data, &f); err != nil {
			fs.t.Errorf("host sent a malformed frame: %v", err)
		}
		if f.Type == shared.FrameReport && fs.confirming.Load() {
			confirm, _ := json.Marshal(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
			_ = conn.Write(context.Background(), websocket.MessageText, confirm)
			continue
		}
		ce.frames <- &f
	}
}

// sendBinary pushes hooks as a binary webhooks frame, as a cloud does to a
// host that reads them.
func (ce *cloudEnd) sendBinary(hooks []shared.Webhook) {
	ce.t.Helper()
	data, err := shared.AppendWebhooksFrame(nil, hooks)
	require.NoError(ce.t, err)
	ce.sendRaw(websocket.MessageBinary, data)
}

func (ce *cloudEnd) sendRaw(typ websocket.MessageType, data []byte) {
	ce.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(ce.t, ce.conn.Write(ctx, typ, data))
}

func (ce *cloudEnd) send(f shared.Frame) {
	ce.t.Helper()
	data, err := json.Marshal(f)
	require.NoError(ce.t, err)
	ce.sendRaw(websocket.MessageText, data)
}

// reports reads the host's reports, confirming each, until they acked and
// nacked at least so many deliveries, and returns what they did.
func (ce *cloudEnd) reports(acked, nacked int) (acks []string, nacks []shared.Nack) {
	ce.t.Helper()
	for len(acks) < acked || len(nacks) < nacked {
		f := ce.next(shared.FrameReport)
		acks, nacks = append(acks, f.Acks...), append(nacks, f.Nacks...)
		ce.send(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
	}
	return acks, nacks
}

// next returns the host's next frame of one of types, confirming the
// reports it passes over and keeping the last credit.
func (ce *cloudEnd) next(types ...string) *shared.Frame {
	ce.t.Helper()
	for {
		select {
		case f := <-ce.frames:
			for _, typ := range types {
				if f.Type == typ {
					return f
				}
			}
			switch f.Type {
			case shared.FrameReport:
				ce.send(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
			case shared.FrameCredit:
				ce.credit = f
			}
		case err := <-ce.closed:
			ce.t.Fatalf("socket closed while waiting for %v: %v", types, err)
		case <-time.After(10 * time.Second):
			ce.t.Fatalf("no %v frame", types)
		}
	}
}

// socketSetup runs the agent on transport, against the fake cloud and its
// socket.
func socketSetup(t *testing.T, transport string, prepare func(*testBundle, *fakeSocket)) (*testBundle, *fakeSocket) {
	var fs *fakeSocket
	b := setup(t, func(b *testBundle) {
		fs = &fakeSocket{t: t, cloud: b.cloud, conns: make(chan *cloudEnd, 10)}
		b.opts = func(o *Options) {
			url, client := b.serve(t, fs)
			o.Cloud = cloudapi.New(url, client, "test")
			o.Transport = transport
		}
		if prepare != nil {
			prepare(b, fs)
		}
	})
	// After the test, before the agent stops (cleanups run last first).
	t.Cleanup(func() { fs.confirming.Store(true) })
	return b, fs
}

// reconnect moves the clock on in small steps until the host opens a
// socket again (within 10 s of its clock), taking the heartbeats it sends
// meanwhile. It runs in a synctest bubble (inMemory): each step waits
// until the host has done all it would at that time.
func (fs *fakeSocket) reconnect(b *testBundle) {
	fs.t.Helper()
	for i := 0; len(fs.conns) == 0; i++ {
		require.Less(fs.t, i, 100, "the socket was never tried again")
		b.clock.Advance(100 * time.Millisecond)
		synctest.Wait()
		for len(b.cloud.requests) > 0 {
			<-b.cloud.requests
		}
	}
}

// inMemory has a socket test's fake cloud served over an in-memory
// network, as a test in a synctest bubble needs.
func inMemory(b *testBundle, _ *fakeSocket) { b.inMemory = true }

func (fs *fakeSocket) accepted() *cloudEnd {
	fs.t.Helper()
	select {
	case ce := <-fs.conns:
		return ce
	case <-time.After(10 * time.Second):
		fs.t.Fatal("the host never opened the socket")
		return nil
	}
}

func TestSocketTransportCreditReportsAndConfirms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs := socketSetup(t, TransportWebSocket, inMemory)
		ce := fs.accepted()
		hello := ce.next(shared.FrameHello)
		require.Equal(t, 2*queuePerWorker, hello.Credit, "the lease window's room")
		require.Empty(t, hello.Held)
		require.True(t, hello.RawBodyOnly)
		require.True(t, hello.BinaryWebhooks)
		require.NotNil(t, hello.Config, "the subscription")
		ce.send(shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: shared.MaxSocketCredit})

		// A cloud that reads no binary_webhooks pushes text frames.
		ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: []shared.Webhook{webhook("d1", "push"), webhook("d2", "push")}})
		acked := map[string]bool{}
		for len(acked) < 2 {
			f := ce.next(shared.FrameReport)
			for _, id := range f.Acks {
				acked[id] = true
			}
			ce.send(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
		}
		require.Equal(t, map[string]bool{"d1": true, "d2": true}, acked)
		b.eventually(t, "outbox emptied once confirmed", func() bool { return b.outbox(t) == 0 })
		// Idle again: the room the two took is granted back.
		c := ce.credit
		if c == nil || c.Received != 2 {
			c = ce.next(shared.FrameCredit)
		}
		require.Equal(t, int64(2), c.Received)
		require.Equal(t, 2*queuePerWorker, c.Credit)

		// A cloud that pushes more than granted breaks the protocol: the host
		// drops the socket and connects again, saying what it holds.
		over := make([]shared.Webhook, 0, 2*queuePerWorker+1)
		block := newBlocked()
		b.handler.fn = block.run
		for i := range 2*queuePerWorker + 1 {
			over = append(over, webhook("x"+string(rune('a'+i)), "push"))
		}
		ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: over})
		select {
		case <-ce.closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the host kept a socket that broke its credit")
		}
		fs.reconnect(b)
		ce = fs.accepted()
		require.Empty(t, ce.next(shared.FrameHello).Held, "none of the excess was taken")
		close(block.release)
	})
}

// TestSocketTransportSendsAFreshTokenBeforeExpiry: in a synctest bubble,
// over an in-memory network, each step of the clock is followed by
// synctest.Wait, so "no token frame yet" is what the host did once it had
// done all it would at that time, not what a window of real time saw.
func TestSocketTransportSendsAFreshTokenBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, fs := socketSetup(t, TransportWebSocket, func(b *testBundle, _ *fakeSocket) { b.inMemory = true })
		ce := fs.accepted()
		ce.next(shared.FrameHello)
		ce.send(shared.Frame{Type: shared.FrameWelcome})
		// 15 min tokens are renewed at 12 min.
		fc := fs.cloud
		for i := 0; ; i++ {
			require.Less(t, i, 40, "no token frame")
			fc.clock.Advance(30 * time.Second)
			synctest.Wait()
			var token *shared.Frame
			for token == nil && len(ce.frames) > 0 {
				f := <-ce.frames
				switch f.Type {
				case shared.FrameReport:
					ce.send(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
					synctest.Wait()
				case shared.FrameToken:
					token = f
				}
			}
			if token == nil {
				continue
			}
			require.Equal(t, "tok-2", token.Token)
			require.GreaterOrEqual(t, i, 23, "not before 80 %% of the token's life")
			return
		}
	})
}

func TestSocketTransportAutoFallsBackToHeartbeatsAndReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs := socketSetup(t, TransportAuto, func(b *testBundle, fs *fakeSocket) {
			inMemory(b, fs)
			fs.refuse.Store(true)
		})
		hb := b.next(t)
		require.True(t, hb.req.AnswerLost, "the first heartbeat after a socket says what the host holds")
		fs.refuse.Store(false)
		// The socket is tried again 2 s (±50 %) later.
		fs.reconnect(b)
		ce := fs.accepted()
		require.Equal(t, shared.FrameHello, ce.next(shared.FrameHello).Type)
	})
}

// With the cloud unreachable, a host on auto goes on backing off across its
// tries of the socket: each failed try runs the heartbeats again, and their
// waits carry on from where the last ones left off rather than starting
// again at a quarter of a second.
func TestSocketFallbackKeepsBackingOff(t *testing.T) {
	retries := &retryLog{}
	b, _ := socketSetup(t, TransportAuto, func(b *testBundle, fs *fakeSocket) {
		fs.refuse.Store(true)
		b.cloud.answer = func(int, shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			return http.StatusServiceUnavailable, shared.HeartbeatResponse{}
		}
		opts := b.opts
		b.opts = func(o *Options) {
			opts(o)
			o.MaxBackoff = 2 * time.Second
			o.Logger = slog.New(retries)
		}
	})
	for i := 0; ; i++ {
		require.Less(t, i, 200, "too few retries: %d socket, %v heartbeat", retries.socket(), retries.heartbeat())
		b.stepUntilHeartbeat(t, 20*time.Millisecond)
		if retries.socket() >= 3 && len(retries.heartbeat()) >= 12 {
			break
		}
	}
	// 250 ms doubling (±50 %) reaches the 2 s cap (±50 %, at most 2 s) at
	// the fourth wait: from there on each is 1–2 s.
	waits := retries.heartbeat()
	for k, d := range waits[3:] {
		require.GreaterOrEqual(t, d, time.Second, "wait %d of %v, after %d failed tries of the socket", k+4, waits, retries.socket())
		require.LessOrEqual(t, d, 2*time.Second)
	}
}

// retryLog is a log handler keeping the host's waits before its retries.
type retryLog struct {
	mu      sync.Mutex
	waits   []time.Duration // each failed heartbeat's retry_in
	sockets int             // failed tries of the socket
}

func (r *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *retryLog) WithGroup(string) slog.Handler            { return r }

func (r *retryLog) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch rec.Message {
	case "socket unavailable; heartbeats meanwhile":
		r.sockets++
	case "heartbeat failed":
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "retry_in" {
				r.waits = append(r.waits, a.Value.Duration())
			}
			return true
		})
	}
	return nil
}

func (r *retryLog) socket() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sockets
}

func (r *retryLog) heartbeat() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

// A cloud that reads binary_webhooks pushes binary frames: the handler gets
// each body byte-exact, whatever its bytes and size.
func TestSocketTransportReadsBinaryWebhooksFrames(t *testing.T) {
	got := make(chan shared.Webhook, 10)
	_, fs := socketSetup(t, TransportWebSocket, func(b *testBundle, _ *fakeSocket) {
		b.handler.fn = func(_ context.Context, w shared.Webhook) handler.Outcome {
			got <- w
			return handler.Outcome{OK: true}
		}
	})
	ce := fs.accepted()
	require.True(t, ce.next(shared.FrameHello).BinaryWebhooks)
	ce.send(shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: shared.MaxSocketCredit})
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	hooks := []shared.Webhook{webhook("d-empty", "push"), webhook("d-bin", "push"), webhook("d-big", "push"), webhook("d-json", "push")}
	hooks[0].RawBody, hooks[0].Body = []byte{}, nil
	hooks[1].RawBody, hooks[1].Body = bin, nil
	hooks[2].RawBody, hooks[2].Body = append(append([]byte(`{"padding":"`), bytes.Repeat([]byte("x"), 300<<10)...), `"}`...), nil
	hooks[3].Body = nil
	ce.sendBinary(hooks)
	want := map[string][]byte{}
	for _, w := range hooks {
		want[w.DeliveryID] = w.RawBody
	}
	seen := map[string][]byte{}
	for len(seen) < len(hooks) {
		select {
		case w := <-got:
			seen[w.DeliveryID] = w.RawBody
			require.Equal(t, "push", w.Headers["x-github-event"])
		case <-time.After(10 * time.Second):
			t.Fatalf("handled %d of %d", len(seen), len(hooks))
		}
	}
	for id, body := range want {
		require.True(t, bytes.Equal(body, seen[id]), "%s byte-exact", id)
	}
	acked := map[string]bool{}
	for len(acked) < len(hooks) {
		f := ce.next(shared.FrameReport)
		for _, id := range f.Acks {
			acked[id] = true
		}
		ce.send(shared.Frame{Type: shared.FrameConfirm, ID: f.ID})
	}
}

// A binary frame that breaks the layout closes the socket with
// CloseProtocol and says why; the host connects again and takes none of
// it.
func TestSocketTransportClosesOnABadBinaryFrame(t *testing.T) {
	good, err := shared.AppendWebhooksFrame(nil, []shared.Webhook{webhook("d1", "push")})
	require.NoError(t, err)
	trailing := append(bytes.Clone(good), 'x')
	frame := func(js, bodies string) []byte {
		m := binary.BigEndian.AppendUint32(nil, uint32(len(js)))
		m = binary.BigEndian.AppendUint32(m, uint32(len(bodies)))
		return append(append(m, js...), bodies...)
	}
	for name, tc := range map[string]struct {
		msg    []byte
		reason string
	}{
		"short header":     {good[:3], "shorter than its header"},
		"cut in the JSON":  {good[:12], "ends in its JSON"},
		"cut in a body":    {good[:len(good)-1], "ends in its bodies"},
		"longer":           {trailing, "longer than its header says"},
		"lengths disagree": {frame(`{"type":"webhooks","webhooks":[{"raw_body_len":2}]}`, "abc"), "add up to 2"},
		"malformed JSON":   {frame(`{"type":"webhooks","webhooks":[{"raw_body_len":2}]`, "ab"), "malformed JSON"},
		"over the limit":   {[]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, "more than"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, fs := socketSetup(t, TransportWebSocket, inMemory)
				ce := fs.accepted()
				ce.next(shared.FrameHello)
				ce.send(shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: shared.MaxSocketCredit})
				ce.sendRaw(websocket.MessageBinary, tc.msg)
				select {
				case err := <-ce.closed:
					require.Equal(t, websocket.StatusCode(shared.CloseProtocol), websocket.CloseStatus(err), "%v", err)
					var ce websocket.CloseError
					require.ErrorAs(t, err, &ce)
					require.Contains(t, ce.Reason, tc.reason)
				case <-time.After(10 * time.Second):
					t.Fatal("the host kept a socket that sent a bad frame")
				}
				fs.reconnect(b)
				ce = fs.accepted()
				require.Empty(t, ce.next(shared.FrameHello).Held, "none of it was taken")
			})
		})
	}
}

// TestSocketTransportStopHandsBackNotStarted: on stop over the socket, the
// running handler's ack and the nacks of the webhooks waiting behind it go
// in a report, each nack saying it never started; so does a webhook pushed
// while the host stops, but not the running one pushed again.
func TestSocketTransportStopHandsBackNotStarted(t *testing.T) {
	g := newGate("g")
	b, fs := socketSetup(t, TransportWebSocket, func(b *testBundle, _ *fakeSocket) {
		b.sources = map[string]Source{"github": {Enabled: true, Routes: []Route{{Handler: g}}}}
	})
	ce := fs.accepted()
	ce.next(shared.FrameHello)
	ce.send(shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: shared.MaxSocketCredit})
	ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: hooks("github", 3)})
	expectStart(t, g, "github:0:1")
	b.cancel()
	b.eventually(t, "stopping", b.agent.Stopping)
	late := webhook("github:9:1", "push")
	ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: []shared.Webhook{hooks("github", 1)[0], late}})
	g.open("github:0:1")
	acks, nacks := ce.reports(1, 3)
	for _, id := range acks {
		require.Equal(t, "github:0:1", id, "the running one is acked (again, pushed after it ran)")
	}
	require.ElementsMatch(t, []shared.Nack{
		{DeliveryID: "github:1:1", Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
		{DeliveryID: "github:2:1", Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
		{DeliveryID: "github:9:1", Error: "host stopping: not started", Retryable: true, Attempt: 1, NotStarted: true},
	}, nacks)
	require.Empty(t, g.started, "nothing else started")
}

// handledThenStopping starts a host on the socket, has it run and ack one
// webhook (first), then stops it: stop is its report saying it stops, not
// yet confirmed.
func handledThenStopping(t *testing.T) (*testBundle, *cloudEnd, shared.Webhook, *shared.Frame) {
	t.Helper()
	b, fs := socketSetup(t, TransportWebSocket, nil)
	ce := fs.accepted()
	ce.next(shared.FrameHello)
	ce.send(shared.Frame{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: shared.MaxSocketCredit})
	first := webhook("github:1:1", "push")
	ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: []shared.Webhook{first}})
	acked := ce.next(shared.FrameReport)
	require.Equal(t, []string{first.DeliveryID}, acked.Acks)
	require.False(t, acked.Stopping)
	ce.send(shared.Frame{Type: shared.FrameConfirm, ID: acked.ID})
	b.cancel()
	stop := ce.next(shared.FrameReport)
	require.True(t, stop.Stopping)
	return b, ce, first, stop
}

// TestSocketTransportStopSaysSo: a stopping host with nothing to report
// still sends a report saying it is stopping, and closes only on its
// confirm: a batch the cloud pushed before that confirm (the push raced the
// stop) is read and handed back, not lost with the socket at the cost of
// an attempt.
func TestSocketTransportStopSaysSo(t *testing.T) {
	b, ce, _, stop := handledThenStopping(t)
	require.Empty(t, stop.Acks)
	require.Empty(t, stop.Nacks)
	late := webhook("github:9:1", "push")
	ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: []shared.Webhook{late}})
	ce.send(shared.Frame{Type: shared.FrameConfirm, ID: stop.ID})
	back := ce.next(shared.FrameReport)
	require.False(t, back.Stopping, "said once")
	require.Equal(t, []shared.Nack{{DeliveryID: late.DeliveryID, Error: "host stopping: not started", Retryable: true,
		Attempt: 1, NotStarted: true}}, back.Nacks)
	ce.send(shared.Frame{Type: shared.FrameConfirm, ID: back.ID})
	b.stopped(t)
	require.Equal(t, int32(1), b.handler.calls.Load(), "nothing started after the stop")
}

// TestSocketTransportStopAcksWhatIsDone: a webhook pushed again while the
// host stops, which its ledger already records as done, is acked again,
// not handed back: its side effect happened, and a nack would only cost
// the cloud a retry the ledger then skips.
func TestSocketTransportStopAcksWhatIsDone(t *testing.T) {
	b, ce, first, stop := handledThenStopping(t)
	late := webhook("github:9:1", "push")
	ce.send(shared.Frame{Type: shared.FrameWebhooks, Webhooks: []shared.Webhook{first, late}})
	ce.send(shared.Frame{Type: shared.FrameConfirm, ID: stop.ID})
	acks, nacks := ce.reports(1, 1)
	require.Equal(t, []string{first.DeliveryID}, acks, "done: acked again")
	require.Equal(t, []shared.Nack{{DeliveryID: late.DeliveryID, Error: "host stopping: not started", Retryable: true,
		Attempt: 1, NotStarted: true}}, nacks, "not started: handed back")
	b.stopped(t)
	require.Equal(t, int32(1), b.handler.calls.Load(), "the done one did not run again")
}
