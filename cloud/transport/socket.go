package transport

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/shared"
)

// Timeouts of a socket.
const (
	socketHelloTimeout = 10 * time.Second // from the upgrade to the hello
	socketWriteTimeout = 30 * time.Second // one frame written, or the host is too slow
	socketPingTimeout  = 15 * time.Second // a ping's pong
	// SocketTakeover bounds the wait for a host's old socket to close when a
	// new one replaces it.
	SocketTakeover = 10 * time.Second
	// SocketContactEvery: a pong is recorded as the host's contact when the
	// last one recorded is this old: as often as a host heartbeating at the
	// default interval, every other ping (40 s), within RELAY_HOST_LATE_AFTER's
	// default minute. Each is a write; 10,000 sockets recording every ping
	// made 500 a second.
	SocketContactEvery = 30 * time.Second
)

// Socket upgrades a host's request to a socket on which the cloud pushes
// its deliveries (shared/socket.go): authenticated as a heartbeat is, then
// the delivery core's NextPush, Report, Record, RecordWrite and
// ConnectionLost, decoded from and encoded to frames.
func (s *Transports) Socket(c *gin.Context) {
	host, err := s.edge.AuthHost(c)
	if err != nil {
		s.edge.WriteError(c, err)
		return
	}
	if !isUpgrade(c.Request) {
		s.edge.WriteError(c, shared.Invalid("not a WebSocket upgrade: GET with Connection: Upgrade and Upgrade: websocket"))
		return
	}
	tok, _ := auth.Bearer(c.Request)
	claims, err := s.tokens.Verify(tok) // verified by authHost: its expiry
	if err != nil || claims.ExpiresAt == nil {
		s.edge.WriteError(c, shared.Unauthorized("invalid or expired token"))
		return
	}
	answer := c.Writer.Header() // the upgrade's answer, as Accept sets it
	conn, err := websocket.Accept(smallBuffers{c.Writer}, c.Request, &websocket.AcceptOptions{
		// A host on a slow link can ask for compression (its config's
		// compress; bodies are mostly JSON, in binary frames or
		// base64 in text ones), and the cloud agrees without keeping a
		// window per connection.
		CompressionMode: websocket.CompressionNoContextTakeover,
	})
	if err != nil {
		// Accept answered the client (a request that is no upgrade).
		s.log.Debug("socket upgrade refused", "host", host.ID, "err", err)
		return
	}
	conn.SetReadLimit(shared.MaxSocketFrame)
	s.wg.Add(1)
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(c.Request.Context()))
	ss := &socketSession{
		s: s, conn: conn, host: host, cancel: cancel, done: make(chan struct{}), marker: s.deliveries.NewMarker(host.ID),
		expires: claims.ExpiresAt.Time, outbox: s.deliveries.NewOutbox(), unreported: map[string]bool{},
		deflate: DeflateAgreed(answer),
	}
	// The socket lives on in a goroutine of its own, and this handler
	// returns: its goroutine's stack, deep in the HTTP server's and gin's
	// frames, would otherwise stay with every idle socket (10,000 sockets
	// held 244 MiB of stacks, about 24 KiB each, with it).
	go func() {
		defer s.wg.Done()
		defer cancel(nil)
		defer ss.released()
		ss.serve(ctx)
	}()
}

// DeflateAgreed reports whether a socket's upgrade answer (its headers)
// agreed to permessage-deflate: the cloud agrees whenever a host offers
// it in a form coder/websocket takes, and then every message of 512 bytes
// or more is compressed, each on its own.
func DeflateAgreed(answer http.Header) bool {
	ext, _, _ := strings.Cut(answer.Get("Sec-WebSocket-Extensions"), ";")
	return strings.EqualFold(strings.TrimSpace(ext), "permessage-deflate")
}

// Buffers of a socket's connection, each way. The HTTP server's (4 KiB
// each) are not reused once a connection is hijacked; frames larger than
// these are read and written past them.
const (
	socketReadBuffer  = 1 << 10 // a host's frames: credits, reports, pongs
	socketWriteBuffer = 2 << 10 // confirms, pings and small pushes in one write
)

// smallBuffers hijacks a connection for coder/websocket with buffers sized
// for a socket that mostly idles (socketReadBuffer, socketWriteBuffer).
type smallBuffers struct{ gin.ResponseWriter }

func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.ResponseWriter.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the server read past the request stay first in line.
	n := brw.Reader.Buffered()
	early, _ := brw.Reader.Peek(n)
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn), max(socketReadBuffer, n))
	if n > 0 {
		// Into the new reader's buffer: coder/websocket takes what is
		// buffered and then reads the connection itself.
		if _, err := r.Peek(n); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	return conn, bufio.NewReadWriter(r, bufio.NewWriterSize(conn, socketWriteBuffer)), nil
}

// isUpgrade reports whether r asks to switch to the WebSocket protocol.
func isUpgrade(r *http.Request) bool {
	has := func(header, token string) bool {
		for _, v := range strings.Split(r.Header.Get(header), ",") {
			if strings.EqualFold(strings.TrimSpace(v), token) {
				return true
			}
		}
		return false
	}
	return has("Connection", "upgrade") && has("Upgrade", "websocket")
}
