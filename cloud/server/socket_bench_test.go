package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/transport"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/sharedtest"
)

// BenchmarkSocketWebhooksFrame sends binary webhooks frames (the layout
// writeBinary sends) through a real coder/websocket pair over loopback
// TCP, the cloud's end accepting permessage-deflate as socket() does, the
// host's dialing "plain" or "deflate" (a host with compress), for one
// webhook of the payload mix and a drain's batch of 100
// (scripts/bench/testdata in turn, one a 300 KB push). Reported per frame:
// wire-bytes, read off the host's TCP connection (frame headers included);
// cpu-ns, the process's user+sys time, "write" the cloud's end alone (the
// host's bytes read raw and dropped), "both" with the host's end reading
// each message whole (decompressing it).
//
//	go test -run '^$' -bench SocketWebhooksFrame -benchtime 300x -count 5 ./cloud/server/
//
// Medians of five on 2 shared cores (load 3.6–4.2): one webhook 11,523
// wire-bytes plain, 2,818 deflate; cpu-ns write 15 µs plain, 75 µs
// deflate, both 57 µs, 146 µs. The batch of 100: 1,400,987 and 139,303
// wire-bytes; write 0.90 ms and 4.6 ms, both 2.5 ms and 9.3 ms.
func BenchmarkSocketWebhooksFrame(b *testing.B) {
	for _, batch := range sharedtest.BenchBatches(b) {
		frame, err := shared.AppendWebhooksFrame(nil, batch.Hooks)
		require.NoError(b, err)
		for _, mode := range []string{"plain", "deflate"} {
			for _, ends := range []string{"write", "both"} {
				b.Run(batch.Name+"/"+mode+"/"+ends, func(b *testing.B) {
					b.SetBytes(int64(batch.Bytes))
					benchSocketFrames(b, frame, mode == "deflate", ends == "both")
				})
			}
		}
	}
}

func benchSocketFrames(b *testing.B, frame []byte, deflate, read bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionNoContextTakeover})
		if err != nil {
			return
		}
		defer conn.CloseNow()
		<-start
		for range b.N {
			if err := conn.Write(ctx, websocket.MessageBinary, frame); err != nil {
				return
			}
		}
		// Closed once written: what was sent arrives before the end.
	}))
	defer srv.Close()

	var raw net.Conn
	var wire atomic.Int64
	opts := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			raw = c
			return &countingConn{Conn: c, read: &wire}, err
		}}}}
	if deflate {
		opts.CompressionMode = websocket.CompressionNoContextTakeover
	}
	conn, resp, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):], opts)
	require.NoError(b, err)
	defer conn.CloseNow()
	require.Equal(b, deflate, transport.DeflateAgreed(resp.Header))
	conn.SetReadLimit(64 << 20) // the host's
	handshake := wire.Load()

	// What one frame takes on the wire, read by the host's end.
	close(start)
	cpu0 := cpuTime()
	b.ResetTimer()
	if read {
		for range b.N {
			typ, data, err := conn.Read(ctx)
			require.NoError(b, err)
			require.Equal(b, websocket.MessageBinary, typ)
			require.Len(b, data, len(frame))
		}
	} else {
		// The host's end only drains the connection to its end: what the
		// cloud spends writing.
		_, err := io.Copy(io.Discard, &countingConn{Conn: raw, read: &wire})
		require.NoError(b, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(wire.Load()-handshake)/float64(b.N), "wire-bytes")
}

// cpuTime is the process's user+sys time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
