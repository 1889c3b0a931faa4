// Package cloudapi is the host's client for the cloud's host API: claim,
// token, heartbeat, the socket (Socket: dial, frames both ways, close),
// and the host's own deliveries and sources, speaking the shapes of
// package shared. Answers are requested gzip-compressed — heartbeat
// answers in the binary layout (shared.MediaTypeWebhooksBinary) first,
// unless the client compresses (Compress) — and decoded here; the binary
// layout is read by shared's one reader.
package cloudapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/shared"
)

// maxResponse bounds a decoded answer (a heartbeat batch of large bodies,
// base64-encoded, stays well below it).
const maxResponse = 256 << 20

// Error is a non-2xx answer of the cloud.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("cloud answered %d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("cloud answered %d: %s", e.Status, e.Message)
}

// StatusOf returns the HTTP status of a cloud *Error in err's chain, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Client calls one cloud.
type Client struct {
	baseURL   string
	http      *http.Client
	userAgent string
	// compress asks for what the cloud sends compressed: heartbeat answers
	// as gzip-compressed JSON rather than the binary layout, and the socket
	// with permessage-deflate.
	compress bool
}

// Option sets an option of a Client.
type Option func(*Client)

// Compress, on, has the cloud compress what it sends this client, for a
// slow or metered link: heartbeat answers come as gzip-compressed JSON
// (the binary layout, never compressed, is not asked for) and the socket
// is dialed with permessage-deflate. Fewer bytes on the wire for CPU on
// both sides.
func Compress(on bool) Option { return func(c *Client) { c.compress = on } }

// New returns a client of the cloud at baseURL.
func New(baseURL string, hc *http.Client, userAgent string, opts ...Option) *Client {
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), http: hc, userAgent: userAgent}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Claim exchanges a one-time claim code for the host's credential.
func (c *Client) Claim(ctx context.Context, req shared.ClaimRequest) (shared.ClaimResponse, error) {
	var resp shared.ClaimResponse
	if err := c.post(ctx, shared.PathClaim, "", req, &resp); err != nil {
		return shared.ClaimResponse{}, fmt.Errorf("claim: %w", err)
	}
	return resp, nil
}

// Token exchanges the host's credential for a fresh token.
func (c *Client) Token(ctx context.Context, req shared.TokenRequest) (shared.TokenResponse, error) {
	var resp shared.TokenResponse
	if err := c.post(ctx, shared.PathToken, "", req, &resp); err != nil {
		return shared.TokenResponse{}, fmt.Errorf("token: %w", err)
	}
	if resp.Token == "" {
		return shared.TokenResponse{}, errors.New("token: answer carries no token")
	}
	return resp, nil
}

// Heartbeat reports outcomes and leases new work, authenticated by token.
func (c *Client) Heartbeat(ctx context.Context, token string, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	accept := heartbeatAccept
	if c.compress {
		accept = "" // JSON, gzip-compressed
	}
	var resp shared.HeartbeatResponse
	if err := c.send(ctx, http.MethodPost, shared.PathHeartbeat, token, accept, req, &resp); err != nil {
		return shared.HeartbeatResponse{}, fmt.Errorf("heartbeat: %w", err)
	}
	return resp, nil
}

// HostDeliveries reads one page of the cloud's record of this host's
// deliveries received since (newest first), after cursor ("" for the first
// page), authenticated by token.
func (c *Client) HostDeliveries(ctx context.Context, token string, since time.Time, cursor string) (shared.HostDeliveriesResponse, error) {
	q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}, "limit": {"500"}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var resp shared.HostDeliveriesResponse
	if err := c.send(ctx, http.MethodGet, shared.PathHostDeliveries+"?"+q.Encode(), token, "", nil, &resp); err != nil {
		return shared.HostDeliveriesResponse{}, fmt.Errorf("host deliveries: %w", err)
	}
	return resp, nil
}

// Sources reads this host's sources as the cloud has them (name, provider,
// enabled, event filter), authenticated by token, to compare with the
// host's configuration (shared.CompareSources).
func (c *Client) Sources(ctx context.Context, token string) (shared.HostSourcesResponse, error) {
	var resp shared.HostSourcesResponse
	if err := c.send(ctx, http.MethodGet, shared.PathHostSources, token, "", nil, &resp); err != nil {
		return shared.HostSourcesResponse{}, fmt.Errorf("host sources: %w", err)
	}
	return resp, nil
}

func (c *Client) post(ctx context.Context, path, token string, in, out any) error {
	return c.send(ctx, http.MethodPost, path, token, "", in, out)
}

// heartbeatAccept asks for a heartbeat's answer in the binary layout, and
// takes JSON from a cloud that predates it.
const heartbeatAccept = shared.MediaTypeWebhooksBinary + ", application/json"

// send sends a request (with in as its JSON body unless nil; accept, when
// set, as its Accept) and decodes the answer into out: JSON, or for a
// heartbeat an answer in the binary layout when its Content-Type says so.
func (c *Client) send(ctx context.Context, method, path, token, accept string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	// Asking explicitly turns off the transport's transparent decoding; the
	// answer is decoded below.
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("User-Agent", c.userAgent)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()

	var r io.Reader = resp.Body
	length := resp.ContentLength
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		length = -1 // the compressed answer's
		gz, err := getGzipReader(resp.Body)
		if err != nil {
			return fmt.Errorf("read gzip answer: %w", err)
		}
		defer putGzipReader(gz)
		r = gz
	}
	// Heartbeat answers run to megabytes: the buffer is reused, since
	// decoding copies what it keeps.
	buf := getAnswerBuffer()
	defer putAnswerBuffer(buf)
	if hb, ok := out.(*shared.HeartbeatResponse); ok && resp.StatusCode >= 200 && resp.StatusCode <= 299 && binaryAnswer(resp.Header) {
		if err := shared.ReadHeartbeatAnswer(r, length, maxResponse, buf, hb, decodeHeartbeatJSON); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		return nil
	}
	if _, err := buf.ReadFrom(io.LimitReader(r, maxResponse+1)); err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	data := buf.Bytes()
	if len(data) > maxResponse {
		return fmt.Errorf("answer larger than %d bytes", maxResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorFrom(resp.StatusCode, data)
	}
	if hb, ok := out.(*shared.HeartbeatResponse); ok {
		err = decodeHeartbeat(data, hb)
	} else {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// binaryAnswer reports whether an answer's Content-Type is the binary
// heartbeat answer's.
func binaryAnswer(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == shared.MediaTypeWebhooksBinary
}

// answerBuffers is a free list of answer buffers. Not a sync.Pool: a pool
// is emptied by every garbage collection, and a draining host collects often
// enough that each multi-megabyte answer grew a new buffer from nothing.
var answerBuffers = make(chan *bytes.Buffer, 2)

// Buffers kept for reuse are bounded: a rare huge answer's buffer goes to the
// garbage collector, and so does a large buffer once answers are small again
// (the backlog is drained), so an idle host does not hold megabytes.
const (
	maxPooledAnswer = 16 << 20
	smallAnswer     = 64 << 10
	largeBuffer     = 1 << 20
)

func getAnswerBuffer() *bytes.Buffer {
	select {
	case b := <-answerBuffers:
		return b
	default:
		return new(bytes.Buffer)
	}
}

func putAnswerBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledAnswer || (b.Cap() > largeBuffer && b.Len() < smallAnswer) {
		return
	}
	b.Reset()
	select {
	case answerBuffers <- b:
	default:
	}
}

// gzipReaders are reused: each new reader allocates its decompressor's
// window and tables (about 40 KiB) for every answer.
var gzipReaders sync.Pool

func getGzipReader(r io.Reader) (*gzip.Reader, error) {
	if gz, ok := gzipReaders.Get().(*gzip.Reader); ok {
		if err := gz.Reset(r); err != nil {
			return nil, err
		}
		return gz, nil
	}
	return gzip.NewReader(r)
}

func putGzipReader(gz *gzip.Reader) {
	_ = gz.Close()
	gzipReaders.Put(gz)
}

func errorFrom(status int, data []byte) *Error {
	var er shared.ErrorResponse
	if err := json.Unmarshal(data, &er); err == nil && er.Error.Message != "" {
		return &Error{Status: status, Code: er.Error.Code, Message: er.Error.Message}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}
