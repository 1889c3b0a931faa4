package rig

import (
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/shared"
)

// Hit is what a Receiver saw for one Idempotency-Key.
type Hit struct {
	Count   int       // requests with this key
	First   time.Time // arrival of the first (body read)
	Last    time.Time // arrival of the last
	EventID string    // the provider's event id header of the first (X-GitHub-Delivery)
	Source  string    // X-Relay-Source of the first
	Sum     [32]byte  // SHA-256 of the first body, when ReceiverOptions.HashBodies
	Differs bool      // a later body's SHA-256 differed from the first's (HashBodies)
	// StepTimes is the first's X-Relay-Step-Times header (shared/steptime).
	StepTimes string
}

// ReceiverOptions tune a Receiver.
type ReceiverOptions struct {
	// Addr to listen on; a free 127.0.0.1 port when empty.
	Addr string
	// Answer decides the status of each request, given its Idempotency-Key
	// and how many requests with that key arrived so far (this one
	// included). Nil answers 200. Requests are recorded whatever it answers.
	Answer func(r *http.Request, key string, n int) int
	// HashBodies keeps a SHA-256 of every body, to check redeliveries are
	// byte-identical.
	HashBodies bool
}

// Receiver is the local app behind a host: an HTTP server that records every
// request by its Idempotency-Key header. It is cheap per request (one map
// update under a lock), so it keeps up with tens of thousands a second.
type Receiver struct {
	URL string // http://ADDR/hook, the URL to forward to

	opts  ReceiverOptions
	srv   *http.Server
	total atomic.Int64

	mu    sync.Mutex
	byKey map[string]*Hit
	wait  chan struct{} // closed and replaced on every request
}

// StartReceiver listens and serves until Close.
func StartReceiver(opts ReceiverOptions) (*Receiver, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	rc := &Receiver{URL: "http://" + l.Addr().String() + "/hook", opts: opts, byKey: map[string]*Hit{}, wait: make(chan struct{})}
	rc.srv = &http.Server{Handler: http.HandlerFunc(rc.serve), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = rc.srv.Serve(l) }()
	return rc, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	var sum [32]byte
	if rc.opts.HashBodies {
		bp := bufPool.Get().(*[]byte)
		buf := (*bp)[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := r.Body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err != nil {
				break
			}
		}
		sum = sha256.Sum256(buf)
		*bp = buf
		bufPool.Put(bp)
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	now := time.Now()
	key := r.Header.Get(shared.HeaderIdempotencyKey)
	rc.mu.Lock()
	h := rc.byKey[key]
	if h == nil {
		h = &Hit{First: now, EventID: r.Header.Get("X-GitHub-Delivery"), Source: r.Header.Get(shared.HeaderSource), Sum: sum,
			StepTimes: r.Header.Get("X-Relay-Step-Times")}
		rc.byKey[key] = h
	} else if rc.opts.HashBodies && h.Sum != sum {
		h.Differs = true
	}
	h.Count++
	h.Last = now
	n := h.Count
	close(rc.wait)
	rc.wait = make(chan struct{})
	rc.mu.Unlock()
	rc.total.Add(1)
	status := 200
	if rc.opts.Answer != nil {
		status = rc.opts.Answer(r, key, n)
	}
	w.WriteHeader(status)
}

// Total is how many requests arrived.
func (rc *Receiver) Total() int { return int(rc.total.Load()) }

// Unique is how many distinct Idempotency-Keys arrived.
func (rc *Receiver) Unique() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.byKey)
}

// Duplicates is how many requests repeated a key already seen.
func (rc *Receiver) Duplicates() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	d := 0
	for _, h := range rc.byKey {
		d += h.Count - 1
	}
	return d
}

// Get returns what arrived for a key (ok false if nothing).
func (rc *Receiver) Get(key string) (Hit, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h, ok := rc.byKey[key]
	if !ok {
		return Hit{}, false
	}
	return *h, true
}

// Snapshot copies every key's Hit.
func (rc *Receiver) Snapshot() map[string]Hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]Hit, len(rc.byKey))
	for k, h := range rc.byKey {
		out[k] = *h
	}
	return out
}

// Reset forgets every request seen.
func (rc *Receiver) Reset() {
	rc.mu.Lock()
	rc.byKey = map[string]*Hit{}
	rc.mu.Unlock()
	rc.total.Store(0)
}

// Changed returns a channel closed at the next request's arrival, so a
// caller can wait for progress without polling.
func (rc *Receiver) Changed() <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.wait
}

// Close stops the server and closes its connections.
func (rc *Receiver) Close() error {
	if err := rc.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
