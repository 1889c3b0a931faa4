package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/relaykit/relay/shared"
)

// ForwardOptions configures a Forward handler.
type ForwardOptions struct {
	URL            string
	ConnectTimeout time.Duration // dial timeout
	Timeout        time.Duration // whole request, body included
	Retry4xx       bool          // is a 3xx/4xx (other than 429) retryable?
	// MaxConns is how many idle connections to the target are kept for
	// reuse: the number of webhooks that may run at once (default 4).
	MaxConns int
}

// Forward POSTs a webhook's raw body, byte-exact, with the provider's headers,
// to a URL. It does not follow redirects.
type Forward struct {
	opts   ForwardOptions
	url    *url.URL
	client *http.Client
	name   string
	// names remembers header names' canonical spellings (canonical).
	names      sync.Map // string -> string
	namesCount atomic.Int32
}

// maxNames bounds how many header names a Forward remembers.
const maxNames = 256

// canonical returns http.CanonicalHeaderKey(k), remembered: a provider
// sends the same few names with every webhook, and spelling a lower-case
// name anew allocated each of them for every request. The first maxNames
// names are remembered; others are spelled each time.
func (f *Forward) canonical(k string) string {
	if ck, ok := f.names.Load(k); ok {
		return ck.(string)
	}
	ck := http.CanonicalHeaderKey(k)
	// A place is taken before the name is stored, so that concurrent
	// requests never remember more than maxNames.
	if f.namesCount.Add(1) <= maxNames {
		if _, loaded := f.names.LoadOrStore(k, ck); !loaded {
			return ck
		}
	}
	f.namesCount.Add(-1)
	return ck
}

// forwardWriteBuffer is each connection's write buffer: a request's head
// and a body of up to about this size go out in one write. With the
// client's default (4 KB) a webhook of a few KB took two, the body's
// remainder copied on its own.
const forwardWriteBuffer = 32 << 10

// NewForward returns a Forward handler for opts.
func NewForward(opts ForwardOptions) (*Forward, error) {
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("forward url: %w", err)
	}
	// The ledger names the target without credentials or query.
	name := "forward " + (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	dialer := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: opts.ConnectTimeout,
		MaxIdleConns:        max(opts.MaxConns, 4),
		MaxIdleConnsPerHost: max(opts.MaxConns, 4),
		IdleConnTimeout:     90 * time.Second,
		WriteBufferSize:     forwardWriteBuffer,
	}
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return &Forward{opts: opts, url: u, client: client, name: name}, nil
}

// Name describes the handler for the ledger.
func (f *Forward) Name() string { return f.name }

// hopByHop are headers that describe one connection, not the message, plus
// the ones the HTTP client computes itself.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Proxy-Connection":    true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Content-Length":      true,
	"Host":                true,
}

// Handle forwards the job's webhook and maps the answer: 2xx is success; 429,
// 5xx, timeouts and connection errors are retryable; other answers are
// retryable only when Retry4xx is set.
func (f *Forward) Handle(ctx context.Context, job Job) Outcome {
	w := job.Webhook
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", bytes.NewReader(w.RawBody))
	if err != nil {
		return failure(false, fmt.Sprintf("build request: %v", err))
	}
	// The target was parsed once; each request gets its own copy.
	u := *f.url
	req.URL, req.Host = &u, strings.TrimSuffix(u.Host, ":")
	req.Header = make(http.Header, len(w.Headers)+5)
	// Headers named by the provider's Connection header are hop-by-hop too.
	var connTokens map[string]bool
	for k, v := range w.Headers {
		if f.canonical(k) == "Connection" {
			if connTokens == nil {
				connTokens = map[string]bool{}
			}
			for _, tok := range strings.Split(v, ",") {
				connTokens[http.CanonicalHeaderKey(strings.TrimSpace(tok))] = true
			}
		}
	}
	// A header Go's client would refuse (a control character in its value,
	// a name that is no token) would fail every attempt: it is dropped, and
	// the ledger's output says so. The others are the provider's bytes.
	var dropped []string
	for k, v := range w.Headers {
		ck := f.canonical(k)
		if hopByHop[ck] || connTokens[ck] {
			continue
		}
		if !validHeaderName(k) || !validHeaderValue(v) {
			dropped = append(dropped, strconv.Quote(head([]byte(k), 64)))
			continue
		}
		req.Header[ck] = append(req.Header[ck], v)
	}
	id := safeID(w.DeliveryID)
	req.Header.Set(shared.HeaderDeliveryID, id)
	req.Header.Set(shared.HeaderSource, safeID(w.Source))
	req.Header.Set(shared.HeaderAttempt, strconv.Itoa(w.Attempt))
	req.Header.Set(shared.HeaderIdempotencyKey, id)
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "relay-host")
	}

	o := f.send(ctx, req)
	if len(dropped) > 0 {
		sort.Strings(dropped)
		o.Output = withNote("relay: provider headers not forwarded, their names or values are not valid in HTTP: "+
			strings.Join(dropped, ", "), o.Output)
	}
	return o
}

// send makes the request and maps the answer.
func (f *Forward) send(ctx context.Context, req *http.Request) Outcome {
	resp, err := f.client.Do(req)
	if err != nil {
		return failure(true, describeTransportError(ctx, err, f.opts.Timeout))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxOutput+utf8.UTFMax))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused

	o := Outcome{ResponseStatus: resp.StatusCode, Output: head(body, MaxOutput)}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		o.OK = true
		return o
	}
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
		msg += " redirect to " + loc + " (not followed)"
	}
	if s := snippet(body); s != "" {
		msg += ": " + s
	}
	o.Error = msg
	o.Retryable = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || f.opts.Retry4xx
	return o
}

func describeTransportError(ctx context.Context, err error, timeout time.Duration) string {
	var netErr net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("timeout after %s", timeout)
	case errors.Is(ctx.Err(), context.Canceled):
		return "canceled: host shutting down"
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("timeout: %v", unwrapURLError(err))
	}
	return fmt.Sprintf("connection error: %v", unwrapURLError(err))
}

// unwrapURLError drops the *url.Error wrapper, which repeats method and URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
