package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/transport"
	"github.com/relaykit/relay/shared"
)

// socketSetup is setup with the store's listener running (pushes are woken
// by it) and the sockets closed and waited for at the end.
func socketSetup(t *testing.T) (*bundle, *Server) {
	t.Helper()
	return socketSetupOver(t, nil)
}

// socketSetupOver is socketSetup over wrap of the store (nil: the store).
func socketSetupOver(t *testing.T, wrap func(store.Store) store.Store) (*bundle, *Server) {
	t.Helper()
	return socketSetupWith(t, wrap, Config{})
}

// socketSetupWith is socketSetupOver with cfg (its admin token and lease set).
func socketSetupWith(t *testing.T, wrap func(store.Store) store.Store, cfg Config) (*bundle, *Server) {
	t.Helper()
	ctx := context.Background()
	db := sqlitetest.Open(t)
	var st store.Store = db
	if wrap != nil {
		st = wrap(db)
	}
	clock := newClock()
	cfg.AdminToken, cfg.LeaseFor = testAdmin, time.Minute
	s := testServer(t, st, clock, nil, cfg)
	h := s.Handler()
	srv := httptest.NewServer(h)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.RunWakeups(wctx) }()
	<-s.deliveries.Ready()
	t.Cleanup(func() {
		s.StopWaiting()
		require.NoError(t, s.WaitSockets(ctx))
		srv.Close()
		stop()
		<-done
		st.Close()
	})
	return &bundle{t: t, srv: srv, handler: h, store: st, clock: clock}, s
}

// hostSocket is a test host's end of a socket.
type hostSocket struct {
	t    *testing.T
	conn *websocket.Conn
	// binary counts the binary webhooks frames read, text the text ones.
	binary, text int
}

func (b *bundle) dialSocket(token string) (*hostSocket, *http.Response, error) {
	return b.dialSocketWith(token, &websocket.DialOptions{})
}

// dialSocketWith is dialSocket with opts (its header set here).
func (b *bundle) dialSocketWith(token string, opts *websocket.DialOptions) (*hostSocket, *http.Response, error) {
	u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + shared.PathSocket
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	opts.HTTPHeader = h
	conn, resp, err := websocket.Dial(context.Background(), u, opts)
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(64 << 20)
	hs := &hostSocket{t: b.t, conn: conn}
	b.t.Cleanup(func() { conn.CloseNow() })
	return hs, resp, nil
}

// connect dials and says hello with credit, and reads the welcome.
func (b *bundle) connect(token string, credit int, held ...string) *hostSocket {
	b.t.Helper()
	hs, _, err := b.dialSocket(token)
	require.NoError(b.t, err)
	hs.send(shared.Frame{Type: shared.FrameHello, AgentVersion: "test", Credit: credit, Held: held, RawBodyOnly: true})
	require.Equal(b.t, shared.FrameWelcome, hs.read().Type)
	return hs
}

func (hs *hostSocket) send(f shared.Frame) {
	hs.t.Helper()
	data, err := json.Marshal(f)
	require.NoError(hs.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(hs.t, hs.conn.Write(ctx, websocket.MessageText, data))
}

func (hs *hostSocket) readErr() (*shared.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, data, err := hs.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ == websocket.MessageBinary {
		hs.binary++
		hooks, err := shared.DecodeWebhooksFrame(data, nil)
		require.NoError(hs.t, err)
		return &shared.Frame{Type: shared.FrameWebhooks, Webhooks: hooks}, nil
	}
	var f shared.Frame
	require.NoError(hs.t, json.Unmarshal(data, &f))
	if f.Type == shared.FrameWebhooks {
		hs.text++
	}
	return &f, nil
}

func (hs *hostSocket) read() *shared.Frame {
	hs.t.Helper()
	f, err := hs.readErr()
	require.NoError(hs.t, err)
	return f
}

// pushed reads frames until n webhooks came, and returns their ids.
func (hs *hostSocket) pushed(n int) []string {
	hs.t.Helper()
	var ids []string
	for len(ids) < n {
		f := hs.read()
		require.Equal(hs.t, shared.FrameWebhooks, f.Type)
		for _, w := range f.Webhooks {
			require.Nil(hs.t, w.Body, "raw body only")
			ids = append(ids, w.DeliveryID)
		}
	}
	require.Len(hs.t, ids, n, "never more than granted")
	return ids
}

// closedWith reads until the cloud closes the socket, and returns the code.
func (hs *hostSocket) closedWith() websocket.StatusCode {
	hs.t.Helper()
	for {
		_, err := hs.readErr()
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func (b *bundle) status(hostID, id string) store.Status {
	b.t.Helper()
	d, err := b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(b.t, err)
	return d.Status
}

// connectedWith3 is a new host "h" connected over a socket with credit, and
// the three webhooks send3 sends it.
func (b *bundle) connectedWith3(credit int) (hostID string, hs *hostSocket, ids []string) {
	b.t.Helper()
	hostID, token := b.newHost("h")
	hs = b.connect(token, credit)
	return hostID, hs, b.send3(hostID)
}

func (b *bundle) send3(hostID string) []string {
	b.t.Helper()
	var ids []string
	for _, ev := range []string{"a", "b", "c"} {
		a := b.sendGitHub(hostID, ev, prBody)
		require.Equal(b.t, 200, a.status)
		var r shared.IntakeResponse
		a.json(b.t, &r)
		ids = append(ids, r.DeliveryID)
		b.clock.Advance(time.Millisecond)
	}
	return ids
}

func TestSocketRefusedBeforeUpgrade(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, token := b.newHost("h")
	for name, tok := range map[string]string{"no token": "", "bad token": "nope"} {
		_, resp, err := b.dialSocket(tok)
		require.Error(t, err, name)
		require.Equal(t, 401, resp.StatusCode, name)
	}
	a := b.do("GET", shared.PathSocket, nil, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, 400, a.status, "not an upgrade")
	require.Equal(t, shared.CodeInvalid, a.errCode(t))
	require.Equal(t, 200, b.admin("POST", "/api/hosts/"+hostID+"/deactivate", nil).status)
	_, resp, err := b.dialSocket(token)
	require.Error(t, err)
	require.Equal(t, 401, resp.StatusCode, "a deactivated host's token is refused")
	// Authenticated before anything else.
	a = b.do("GET", shared.PathSocket, nil, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, 401, a.status)
}

func TestSocketPushesWithinCreditAndConfirmsReports(t *testing.T) {
	b, s := socketSetup(t)
	hostID, hs, ids := b.connectedWith3(2)
	got := hs.pushed(2)
	require.Equal(t, ids[:2], got, "oldest first")
	b.clock.Advance(delivery.MarkAfter) // unreported: marked on their own
	for _, id := range got {
		require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusDelivered }, 5*time.Second, time.Millisecond,
			"written: delivered, as a heartbeat's answer")
	}
	settled(t, s, hostID, func() bool { return b.status(hostID, ids[2]) != store.StatusQueued })
	require.Equal(t, store.StatusQueued, b.status(hostID, ids[2]), "no credit left: the third waits")

	hs.send(shared.Frame{Type: shared.FrameCredit, Received: 2, Credit: 1})
	require.Equal(t, ids[2:], hs.pushed(1))

	hs.send(shared.Frame{Type: shared.FrameReport, ID: 7, Acks: ids[:2], Nacks: []shared.Nack{{DeliveryID: ids[2], Error: "boom", Retryable: true, Attempt: 1}}})
	f := hs.read()
	require.Equal(t, shared.FrameConfirm, f.Type)
	require.Equal(t, int64(7), f.ID)
	require.Equal(t, store.StatusAcked, b.status(hostID, ids[0]), "applied before confirmed")
	require.Equal(t, store.StatusAcked, b.status(hostID, ids[1]))
	require.Equal(t, store.StatusRetrying, b.status(hostID, ids[2]))
	require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
}

// A host that reads binary frames gets its webhooks as binary messages,
// bodies byte-exact; one that does not, as JSON text (as before binary
// frames); every other frame is text either way. Either is compressed on
// a socket whose upgrade offered permessage-deflate, and counted so.
func TestSocketBinaryWebhooksFrames(t *testing.T) {
	b, _ := socketSetup(t)
	big := append(append([]byte(`{"padding":"`), bytes.Repeat([]byte("x"), 300<<10)...), `"}`...)
	bodies := [][]byte{prBody, []byte("{}"), big, []byte("{\"odd\":\"\\u0000\\\"<&>\"}")}
	for _, tc := range []struct {
		name            string
		binary, deflate bool
	}{{"binary", true, false}, {"text", false, false}, {"binary deflate", true, true}, {"text deflate", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			binary := tc.binary
			hostID, token := b.newHost("h")
			wire := &countingConns{}
			opts := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: wire.dial}}}
			if tc.deflate {
				opts.CompressionMode = websocket.CompressionNoContextTakeover
			}
			hs, resp, err := b.dialSocketWith(token, opts)
			require.NoError(t, err)
			require.Equal(t, tc.deflate, transport.DeflateAgreed(resp.Header), "the upgrade's answer")
			hs.send(shared.Frame{Type: shared.FrameHello, AgentVersion: "test", Credit: 10, RawBodyOnly: true, BinaryWebhooks: binary})
			require.Equal(t, shared.FrameWelcome, hs.read().Type)
			want := map[string][]byte{}
			for i, body := range bodies {
				a := b.sendGitHub(hostID, "bin-"+strconv.Itoa(i), body)
				require.Equal(t, 200, a.status, string(a.body))
				var r shared.IntakeResponse
				a.json(t, &r)
				want[r.DeliveryID] = body
			}
			got := map[string][]byte{}
			for len(got) < len(bodies) {
				f := hs.read()
				require.Equal(t, shared.FrameWebhooks, f.Type)
				for _, w := range f.Webhooks {
					require.Equal(t, "github", w.Source)
					require.NotEmpty(t, w.Headers)
					got[w.DeliveryID] = w.RawBody
				}
			}
			require.Equal(t, want, got, "bodies byte-exact")
			if tc.deflate {
				require.Less(t, wire.read.Load(), int64(len(big)/10), "compressed on the wire")
			} else {
				require.Greater(t, wire.read.Load(), int64(len(big)))
			}
			if binary {
				require.Positive(t, hs.binary)
				require.Zero(t, hs.text)
			} else {
				require.Zero(t, hs.binary)
				require.Positive(t, hs.text)
			}
			var acks []string
			for id := range got {
				acks = append(acks, id)
			}
			hs.send(shared.Frame{Type: shared.FrameReport, ID: 1, Acks: acks})
			require.Equal(t, shared.FrameConfirm, hs.read().Type, "other frames stay text")
			require.Equal(t, store.StatusAcked, b.status(hostID, acks[0]))
			require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
		})
	}
	// Counted once written, by encoding.
	require.Eventually(t, func() bool {
		m := string(b.admin("GET", "/metrics", nil).body)
		return strings.Contains(m, `relay_webhooks_sent_total{encoding="binary",transport="socket"} 4`) &&
			strings.Contains(m, `relay_webhooks_sent_total{encoding="json",transport="socket"} 4`) &&
			strings.Contains(m, `relay_webhooks_sent_total{encoding="binary+deflate",transport="socket"} 4`) &&
			strings.Contains(m, `relay_webhooks_sent_total{encoding="json+deflate",transport="socket"} 4`)
	}, 5*time.Second, time.Millisecond)
}

// countingConns dials TCP connections that count the bytes read off them.
type countingConns struct{ read atomic.Int64 }

func (cc *countingConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, read: &cc.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// The upgrade's answer tells whether the socket compresses: the extension
// named first, in any case, with or without parameters.
func TestDeflateAgreed(t *testing.T) {
	for ext, want := range map[string]bool{
		"permessage-deflate; client_no_context_takeover; server_no_context_takeover": true,
		"permessage-deflate":     true,
		" PerMessage-Deflate ;":  true,
		"":                       false,
		"x-webkit-deflate-frame": false,
		"permessage-deflatex; a": false,
	} {
		h := http.Header{}
		if ext != "" {
			h.Set("Sec-WebSocket-Extensions", ext)
		}
		require.Equal(t, want, transport.DeflateAgreed(h), ext)
	}
}

func TestSocketCloseReleasesWhatWasNotReported(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, token := b.newHost("h")
	hs := b.connect(token, 10)
	ids := b.send3(hostID)
	got := hs.pushed(3)
	hs.send(shared.Frame{Type: shared.FrameReport, ID: 1, Acks: got[:1]})
	require.Equal(t, shared.FrameConfirm, hs.read().Type)
	hs.conn.CloseNow() // the socket dies
	for _, id := range ids[1:] {
		require.Eventually(t, func() bool { return b.status(hostID, id) == store.StatusRetrying }, 5*time.Second, time.Millisecond)
		evs, err := b.store.DeliveryEventList(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, "the socket carrying it closed", evs[len(evs)-1].Reason)
	}
	require.Equal(t, store.StatusAcked, b.status(hostID, ids[0]))

	// The next socket gets them at once.
	hs = b.connect(token, 10)
	require.ElementsMatch(t, ids[1:], hs.pushed(2))
}

func TestSocketHelloReleasesWhatTheHostDoesNotHold(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, token := b.newHost("h")
	ids := b.send3(hostID)
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Len(t, hb.Webhooks, 3, "leased by a heartbeat whose answer is then lost")
	hs := b.connect(token, 10, ids[0])
	require.ElementsMatch(t, ids[1:], hs.pushed(2), "what the host does not hold is due again at once")
	require.Equal(t, store.StatusDelivered, b.status(hostID, ids[0]))
}

func TestSocketOnePerHost(t *testing.T) {
	b, _ := socketSetup(t)
	_, token := b.newHost("h")
	first := b.connect(token, 1)
	second := b.connect(token, 1)
	require.Equal(t, websocket.StatusCode(shared.CloseReplaced), first.closedWith())
	require.NoError(t, second.conn.Close(websocket.StatusNormalClosure, ""))
}

func TestSocketClosedForADeactivatedHost(t *testing.T) {
	b, _ := socketSetup(t)
	for _, credit := range []int{0, 5} { // waiting for credit, or for work
		hostID, token := b.newHost("h")
		hs := b.connect(token, credit)
		require.Equal(t, 200, b.admin("POST", "/api/hosts/"+hostID+"/deactivate", nil).status)
		require.Equal(t, websocket.StatusCode(shared.CloseRevoked), hs.closedWith(), "credit %d", credit)
	}
}

func TestSocketRefusesBadFrames(t *testing.T) {
	b, _ := socketSetup(t)
	_, token := b.newHost("h")
	for name, tc := range map[string]struct {
		frames []shared.Frame
		raw    []byte
		binary bool // raw as a binary message
		code   websocket.StatusCode
	}{
		"binary from the host":      {frames: []shared.Frame{{Type: shared.FrameHello, BinaryWebhooks: true}}, raw: []byte(`{"type":"credit"}`), binary: true, code: shared.CloseProtocol},
		"report before hello":       {frames: []shared.Frame{{Type: shared.FrameReport, ID: 1}}, code: shared.CloseProtocol},
		"more received than pushed": {frames: []shared.Frame{{Type: shared.FrameHello}, {Type: shared.FrameCredit, Received: 5}}, code: shared.CloseProtocol},
		"unknown frame":             {frames: []shared.Frame{{Type: shared.FrameHello}, {Type: "shout"}}, code: shared.CloseProtocol},
		"too many in a report":      {frames: []shared.Frame{{Type: shared.FrameHello}, {Type: shared.FrameReport, Acks: make([]string, shared.MaxReportItems+1)}}, code: shared.CloseProtocol},
		"another host's token":      {frames: []shared.Frame{{Type: shared.FrameHello}, {Type: shared.FrameToken, Token: "nope"}}, code: shared.CloseUnauthorized},
		"malformed":                 {raw: []byte(`{"type":`), code: shared.CloseProtocol},
		"over the frame limit":      {raw: append(append([]byte(`{"type":"hello","agent_version":"`), bytes.Repeat([]byte("x"), shared.MaxSocketFrame)...), '"', '}'), code: websocket.StatusMessageTooBig},
	} {
		t.Run(name, func(t *testing.T) {
			hs, _, err := b.dialSocket(token)
			require.NoError(t, err)
			for _, f := range tc.frames {
				hs.send(f)
			}
			if tc.raw != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				typ := websocket.MessageText
				if tc.binary {
					typ = websocket.MessageBinary
				}
				_ = hs.conn.Write(ctx, typ, tc.raw)
			}
			require.Equal(t, tc.code, hs.closedWith())
		})
	}
}

// socketTimers is how many timers an idle socket, with nothing pushed,
// sets on the fake clock: its ping and its token's expiry.
const socketTimers = 2

func TestSocketClosedWhenItsTokenExpiresUnlessRefreshed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, s := socketSetup(t)
	_, token := b.newHost("h")
	hs := b.connect(token, 0)
	// A fresh token, issued later, moves the socket's end.
	b.clock.Advance(10 * time.Minute)
	var claims *auth.Claims
	claims, err := s.tokens.Verify(token)
	require.NoError(t, err)
	fresh, _, err := s.tokens.Issue(claims.Subject, claims.Generation)
	require.NoError(t, err)
	hs.send(shared.Frame{Type: shared.FrameToken, Token: fresh})
	hs.send(shared.Frame{Type: shared.FrameReport, ID: 1}) // frames apply in order: once confirmed, the token is in
	require.Equal(t, shared.FrameConfirm, hs.read().Type)
	// Pings are answered while the test host reads.
	done := make(chan websocket.StatusCode, 1)
	go func() { done <- hs.closedWith() }()
	// Past the first token's 15 min, the socket's expiry fires, finds the
	// fresh token's end and is set again, as its ping is: once both wait on
	// the clock again, the socket staying open is a fact, not a bet on time.
	require.NoError(t, b.clock.BlockUntilContext(ctx, socketTimers))
	b.clock.Advance(6 * time.Minute)
	require.NoError(t, b.clock.BlockUntilContext(ctx, socketTimers))
	require.Empty(t, done)
	b.clock.Advance(15 * time.Minute)
	require.Equal(t, websocket.StatusCode(shared.CloseTokenExpired), <-done)
}

func TestSocketRecordsContactEveryOtherPing(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, token := b.newHost("h")
	hs := b.connect(token, 0)
	go hs.closedWith() // answers pings
	ctx := context.Background()
	h, err := b.store.HostGet(ctx, hostID)
	require.NoError(t, err)
	hello := *h.LastHeartbeatAt
	var last time.Time
	require.Eventually(t, func() bool {
		b.clock.Advance(time.Second)
		h, err := b.store.HostGet(ctx, hostID)
		require.NoError(t, err)
		last = *h.LastHeartbeatAt
		return last.After(hello)
	}, 20*time.Second, 10*time.Millisecond)
	// The first ping (20 s) is not recorded; the second (40 s) is.
	require.GreaterOrEqual(t, last.Sub(hello), transport.SocketContactEvery)
	require.Less(t, last.Sub(hello), 2*shared.SocketPingEvery+5*time.Second)
}

// TestSocketReplacedWithoutWaitingForTheOld: the older socket's peer never
// answers the close (it is half-open); the newer one is welcomed without
// waiting for the close handshake, and gets what the old one carried.
func TestSocketReplacedWithoutWaitingForTheOld(t *testing.T) {
	b, _ := socketSetup(t)
	hostID, token := b.newHost("h")
	first := b.connect(token, 10)
	ids := b.send3(hostID)
	require.ElementsMatch(t, ids, first.pushed(3))
	// first is not read from again until the end: it answers no close.
	start := time.Now()
	second := b.connect(token, 10)
	require.Less(t, time.Since(start), 3*time.Second, "not the 5 s of a close handshake")
	require.ElementsMatch(t, ids, second.pushed(3), "released by the old socket")
	require.Equal(t, websocket.StatusCode(shared.CloseReplaced), first.closedWith())
}

// TestSocketHelloSentWithTheUpgrade: a host that writes its hello right
// behind the upgrade request (the HTTP server has read it already when the
// connection is hijacked) is welcomed: no byte is lost.
func TestSocketHelloSentWithTheUpgrade(t *testing.T) {
	b, _ := socketSetup(t)
	_, token := b.newHost("h")
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	hello, err := json.Marshal(shared.Frame{Type: shared.FrameHello, AgentVersion: "test", Credit: 1})
	require.NoError(t, err)
	require.Less(t, len(hello), 126)
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(hello))}, mask...)
	for i, c := range hello {
		frame = append(frame, c^mask[i%4])
	}
	req := "GET " + shared.PathSocket + " HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer " + token +
		"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	_, err = conn.Write(append([]byte(req), frame...)) // one write: one segment
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	head := make([]byte, 2)
	_, err = io.ReadFull(br, head)
	require.NoError(t, err)
	require.Equal(t, byte(0x81), head[0], "a text frame")
	n := int(head[1])
	if n == 126 {
		ext := make([]byte, 2)
		_, err = io.ReadFull(br, ext)
		require.NoError(t, err)
		n = int(ext[0])<<8 | int(ext[1])
	}
	payload := make([]byte, n)
	_, err = io.ReadFull(br, payload)
	require.NoError(t, err)
	var welcome shared.Frame
	require.NoError(t, json.Unmarshal(payload, &welcome))
	require.Equal(t, shared.FrameWelcome, welcome.Type)
}
