package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// balancer is a round-robin HTTP load balancer in front of cloud replicas:
// each request goes to the next replica, and to the one after it when the
// replica refuses the connection (it is down, being restarted) — the
// request never reached it, so trying another is safe.
type balancer struct {
	url     string
	targets []*url.URL
	turn    atomic.Int64
	tr      *http.Transport
	hits    []atomic.Int64
	fails   atomic.Int64 // requests no replica took
}

func (e *env) startBalancer(targets []string) (*balancer, error) {
	b := &balancer{tr: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 10 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}, hits: make([]atomic.Int64, len(targets))}
	for _, t := range targets {
		u, err := url.Parse(t)
		if err != nil {
			return nil, err
		}
		b.targets = append(b.targets, u)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(b.targets[0]) },
		Transport: b,
		ErrorLog:  log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b.fails.Add(1)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(l)
	e.onCleanup(func() { srv.Close(); b.tr.CloseIdleConnections() })
	b.url = "http://" + l.Addr().String()
	return b, nil
}

// RoundTrip sends r to the next replica that takes the connection.
func (b *balancer) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body.Close()
	}
	first := int(b.turn.Add(1))
	var lastErr error
	for k := range len(b.targets) {
		i := (first + k) % len(b.targets)
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host = b.targets[i].Scheme, b.targets[i].Host, b.targets[i].Host
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.ContentLength = int64(len(body))
		}
		resp, err := b.tr.RoundTrip(out)
		if err == nil {
			b.hits[i].Add(1)
			return resp, nil
		}
		lastErr = err
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
	}
	return nil, lastErr
}

func (b *balancer) counts() string {
	var parts []string
	for i := range b.hits {
		parts = append(parts, fmt.Sprint(b.hits[i].Load()))
	}
	return strings.Join(parts, "/")
}

// link is a toxiproxy proxy, in-process, between a host and the cloud.
type link struct {
	srv   *toxiproxy.ApiServer
	proxy *toxiproxy.Proxy
	names []string
}

func (e *env) startLink(name, upstream string) (*link, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, err
	}
	l := &link{srv: srv, proxy: p}
	e.onCleanup(func() { l.proxy.Stop() })
	return l, nil
}

func (l *link) url() string { return "http://" + l.proxy.Listen }

// add adds a toxic on both streams; attrs is the toxic's attributes as JSON.
func (l *link) add(kind string, toxicity float64, attrs string) error {
	for _, stream := range []string{"upstream", "downstream"} {
		name := kind + "-" + stream
		_, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name": %q, "type": %q, "stream": %q, "toxicity": %g, "attributes": %s}`, name, kind, stream, toxicity, attrs)))
		if err != nil {
			return fmt.Errorf("toxic %s: %w", name, err)
		}
		l.names = append(l.names, name)
	}
	return nil
}

// clear removes every toxic and closes every connection (they may have
// lost bytes TCP would have retransmitted on a real link): a new proxy on
// the same address. Removing the toxics one by one could hang for good
// (toxiproxy's RemoveToxic waits on links of connections Stop closed, which
// a socket's steady traffic left mid-flush).
func (l *link) clear() error {
	l.proxy.Stop()
	p := toxiproxy.NewProxy(l.srv, l.proxy.Name, l.proxy.Listen, l.proxy.Upstream)
	var err error
	for range 100 { // the port may linger a moment after the stop
		if err = p.Start(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	l.proxy, l.names = p, nil
	return nil
}
