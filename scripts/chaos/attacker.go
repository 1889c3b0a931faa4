package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// attacker is one attacking connection, bound to its source address; it is
// kept alive between requests when the cloud allows.
type attacker struct {
	src  net.IP
	addr string
	rng  *rand.Rand

	conn net.Conn
	br   *bufio.Reader
	stop func() bool // ends the close-on-cancel of conn
}

func (a *attacker) dial(ctx context.Context) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: a.src}, Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", a.addr)
	if err != nil {
		return err
	}
	a.conn, a.br = c, bufio.NewReaderSize(c, 4096)
	a.stop = context.AfterFunc(ctx, func() { c.Close() })
	return nil
}

func (a *attacker) close() {
	if a.conn != nil {
		a.stop()
		a.conn.Close()
		a.conn = nil
	}
}

// roundTrip sends one request — head, then bodyLen bytes of junk — and
// reads the answer. Its outcome is the status, or how it failed.
func (a *attacker) roundTrip(ctx context.Context, head [][]byte, bodyLen int64) string {
	reused := a.conn != nil
	if a.conn == nil {
		if err := a.dial(ctx); err != nil {
			return "dial"
		}
	}
	_ = a.conn.SetDeadline(time.Now().Add(requestTimeout))
	bufs := net.Buffers(slices.Clone(head))
	_, werr := bufs.WriteTo(a.conn)
	if werr == nil && bodyLen > 0 {
		werr = writeJunk(a.conn, bodyLen)
	}
	// The cloud may answer (and close) before the body is all sent: read
	// what it said.
	resp, rerr := http.ReadResponse(a.br, nil)
	if rerr != nil {
		a.close()
		if reused && ctx.Err() == nil && failure(rerr) == "cut" {
			// The cloud may close a kept-alive connection between two
			// requests: once more on a new one.
			return a.roundTrip(ctx, head, bodyLen)
		}
		if werr != nil {
			return failure(werr)
		}
		return failure(rerr)
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if werr != nil || resp.Close || n == 1<<20 { // a longer answer is left unread
		a.close()
	}
	return strconv.Itoa(resp.StatusCode)
}

// failure names a failed request.
func failure(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return "cut"
	default:
		return "error"
	}
}

// slowly opens a connection, sends head, then next(i) every tick until the
// cloud answers or closes it, or ctx ends (outcome ""). held is how long
// the cloud kept it.
func (a *attacker) slowly(ctx context.Context, head []byte, tick time.Duration, next func(i int) []byte) (string, time.Duration) {
	a.close()
	if err := a.dial(ctx); err != nil {
		return "dial", 0
	}
	defer a.close()
	start := time.Now()
	if _, err := a.conn.Write(head); err != nil {
		return failure(err), time.Since(start)
	}
	var probe [64]byte
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return "", 0
		case <-time.After(tick):
		}
		_ = a.conn.SetWriteDeadline(time.Now().Add(requestTimeout))
		if _, err := a.conn.Write(next(i)); err != nil {
			if ctx.Err() != nil {
				return "", 0
			}
			return failure(err), time.Since(start)
		}
		// Has the cloud answered or hung up? A read that times out at
		// once says no.
		_ = a.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := a.conn.Read(probe[:])
		if n > 0 {
			// "HTTP/1.1 408 …"
			if f := strings.Fields(string(probe[:n])); len(f) > 1 {
				return f[1], time.Since(start)
			}
			return "error", time.Since(start)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if ctx.Err() != nil {
			return "", 0
		}
		return failure(err), time.Since(start)
	}
}

// junkBlock is the one block every junk body, long segment and junk value
// is cut from: lower-case host-id characters.
var junkBlock = bytes.Repeat([]byte("0123456789abcdefghjkmnpqrstvwxyz"), longSegment/32+1)

// writeJunk writes n bytes of junk, 32 KiB at a time, from junkBlock.
func writeJunk(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, 32<<10)
		if _, err := w.Write(junkBlock[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// abuseTarget builds the attacking requests against one cloud and its real
// host.
type abuseTarget struct {
	hostID string
	flood  []byte // the header lines of a header flood
	// githubish are headers GitHub sends, without a signature.
	githubish string
}

func newAbuseTarget(addr, hostID string) *abuseTarget {
	t := &abuseTarget{hostID: hostID,
		githubish: "Host: " + addr + "\r\nUser-Agent: GitHub-Hookshot/abuse\r\nContent-Type: application/json\r\n" +
			"X-GitHub-Event: push\r\nX-GitHub-Hook-ID: 292430182\r\n"}
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	t.flood = make([]byte, 0, floodHeaderBytes)
	for i := 0; len(t.flood)+8 <= floodHeaderBytes; i++ {
		t.flood = append(t.flood, digits[i/46656%36], digits[i/1296%36], digits[i/36%36], digits[i%36], ':', '1', '\r', '\n')
	}
	return t
}

func (a *attacker) hex16() string { return fmt.Sprintf("%016x", a.rng.Uint64()) }

// longHostID posts to a made-up host id of longSegment bytes.
func (t *abuseTarget) longHostID(ctx context.Context, a *attacker) (string, time.Duration) {
	id := "h_" + a.hex16()
	return a.roundTrip(ctx, [][]byte{
		[]byte("POST /api/webhooks/" + id), junkBlock[:longSegment-len(id)],
		[]byte("/github HTTP/1.1\r\n" + t.githubish + "X-GitHub-Delivery: " + a.hex16() + "\r\nContent-Length: 2\r\n\r\n{}"),
	}, 0), 0
}

// longSource posts to a made-up source name of longSegment bytes of the
// real host.
func (t *abuseTarget) longSource(ctx context.Context, a *attacker) (string, time.Duration) {
	name := a.hex16()
	return a.roundTrip(ctx, [][]byte{
		[]byte("POST /api/webhooks/" + t.hostID + "/" + name), junkBlock[:longSegment-len(name)],
		[]byte(" HTTP/1.1\r\n" + t.githubish + "X-GitHub-Delivery: " + a.hex16() + "\r\nContent-Length: 2\r\n\r\n{}"),
	}, 0), 0
}

// unsignedBody posts n bytes without a signature to the real host's GitHub
// source (GitHub never retries, so its body is read before the check).
func (t *abuseTarget) unsignedBody(n int64) func(ctx context.Context, a *attacker) (string, time.Duration) {
	return func(ctx context.Context, a *attacker) (string, time.Duration) {
		return a.roundTrip(ctx, [][]byte{[]byte(fmt.Sprintf("POST /api/webhooks/%s/github HTTP/1.1\r\n%sX-GitHub-Delivery: %s\r\nContent-Length: %d\r\n\r\n",
			t.hostID, t.githubish, a.hex16(), n))}, n), 0
	}
}

// headerFlood posts to the real host's GitHub source with 131,072 junk
// header names.
func (t *abuseTarget) headerFlood(ctx context.Context, a *attacker) (string, time.Duration) {
	return a.roundTrip(ctx, [][]byte{
		[]byte("POST /api/webhooks/" + t.hostID + "/github HTTP/1.1\r\nHost: relay\r\nContent-Length: 2\r\n"),
		t.flood, []byte("\r\n{}"),
	}, 0), 0
}

// claimGuess tries a random claim code.
func (t *abuseTarget) claimGuess(ctx context.Context, a *attacker) (string, time.Duration) {
	const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	code := make([]byte, 0, 19)
	for i := range 16 {
		if i > 0 && i%4 == 0 {
			code = append(code, '-')
		}
		code = append(code, crockford[a.rng.IntN(32)])
	}
	return a.postJSON(ctx, "/api/hosts/claim", `{"claim_code":"`+string(code)+`"}`, 0), 0
}

// tokenJunk exchanges junk for a token, in turn: the real host with a made
// up credential, a made-up host, malformed JSON and a body over the limit.
func (t *abuseTarget) tokenJunk(ctx context.Context, a *attacker) (string, time.Duration) {
	switch a.rng.IntN(4) {
	case 0:
		return a.postJSON(ctx, "/api/hosts/token", `{"host_id":"`+t.hostID+`","host_credential":"hc_`+a.hex16()+a.hex16()+`"}`, 0), 0
	case 1:
		return a.postJSON(ctx, "/api/hosts/token", `{"host_id":"h_`+a.hex16()+`","host_credential":"hc_`+a.hex16()+`"}`, 0), 0
	case 2:
		return a.postJSON(ctx, "/api/hosts/token", `{"host_id":`, 0), 0
	default:
		return a.postJSON(ctx, "/api/hosts/token", `{"host_id":"`, 64<<10), 0
	}
}

// postJSON posts body and then junk bytes of junk.
func (a *attacker) postJSON(ctx context.Context, path, body string, junk int64) string {
	return a.roundTrip(ctx, [][]byte{[]byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, int64(len(body))+junk, body))}, junk)
}

// slowHeaders trickles header lines, one a second, and never ends them.
func (t *abuseTarget) slowHeaders(ctx context.Context, a *attacker) (string, time.Duration) {
	head := []byte("POST /api/webhooks/" + t.hostID + "/github HTTP/1.1\r\nHost: relay\r\n")
	return a.slowly(ctx, head, slowHeaderTick, func(i int) []byte { return fmt.Appendf(nil, "X-Slow-%d: %d\r\n", i, i) })
}

// slowBody declares a 25 MiB body to the real host's GitHub source and
// trickles it at 32 KiB/s.
func (t *abuseTarget) slowBody(ctx context.Context, a *attacker) (string, time.Duration) {
	head := fmt.Appendf(nil, "POST /api/webhooks/%s/github HTTP/1.1\r\n%sX-GitHub-Delivery: %s\r\nContent-Length: %d\r\n\r\n",
		t.hostID, t.githubish, a.hex16(), 25<<20)
	return a.slowly(ctx, head, slowBodyTick, func(int) []byte { return junkBlock[:slowBodyPiece] })
}
