package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// sender posts signed GitHub webhooks to one host's source. The body is the
// same real payload every time, so it is signed once; each request carries
// its own X-GitHub-Delivery (the cloud's dedupe key), made from a random
// prefix and a counter.
type sender struct {
	client *http.Client
	url    string
	body   []byte
	header http.Header // GitHub's headers with the signature, without the delivery id
	prefix string
	next   atomic.Int64
}

func newSender(cloudURL, hostID, secret string, conns int) *sender {
	event, body := rig.GitHubPayload()
	h := rig.GitHubHeaders(event, "", rig.GitHubSignature(secret, body))
	h.Del("X-Github-Delivery")
	var p [8]byte
	_, _ = rand.Read(p[:])
	return &sender{
		client: &http.Client{Timeout: 60 * time.Second, Transport: newTransport(conns)},
		url:    rig.WebhookURL(cloudURL, hostID, "github"),
		body:   body,
		header: h,
		prefix: hex.EncodeToString(p[:]) + "-",
	}
}

// newTransport keeps up to conns idle connections to the cloud, so a worker
// reuses its connection instead of dialing per request.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// deliveryID returns the id of request i.
func (s *sender) deliveryID(i int64) string {
	return s.prefix + strconv.FormatInt(i, 10)
}

// indexOf reverses deliveryID (-1 if id is not one of this sender's).
func (s *sender) indexOf(id string) int64 {
	if len(id) <= len(s.prefix) || id[:len(s.prefix)] != s.prefix {
		return -1
	}
	n, err := strconv.ParseInt(id[len(s.prefix):], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// outcome of one request.
type outcome int

const (
	okAnswer  outcome = iota // 2xx
	badStatus                // any other status
	transport                // no answer
)

// send posts webhook i and reports how it went.
func (s *sender) send(ctx context.Context, i int64) outcome {
	req, err := http.NewRequestWithContext(ctx, "POST", s.url, bytes.NewReader(s.body))
	if err != nil {
		return transport
	}
	h := make(http.Header, len(s.header)+1)
	for k, v := range s.header {
		h[k] = v
	}
	h["X-Github-Delivery"] = []string{s.deliveryID(i)}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return transport
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return okAnswer
	}
	return badStatus
}

// close drops the sender's idle connections.
func (s *sender) close() { s.client.CloseIdleConnections() }

// loadResult is what a load run measured.
type loadResult struct {
	OK, BadStatus, Transport int
	Elapsed                  time.Duration
	Lat                      []time.Duration // of the 2xx answers
	Rate                     float64         // 2xx answers per second of Elapsed
}

func (r *loadResult) merge(lat []time.Duration, ok, bad, tr int) {
	r.Lat = append(r.Lat, lat...)
	r.OK += ok
	r.BadStatus += bad
	r.Transport += tr
}

// closedLoop runs conc workers that each send, wait for the answer and send
// again, for d (or until limit requests were started, if limit > 0).
func (s *sender) closedLoop(ctx context.Context, conc int, d time.Duration, limit int64) loadResult {
	var (
		res     loadResult
		mu      sync.Mutex
		wg      sync.WaitGroup
		started atomic.Int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			var ok, bad, tr int
			for ctx.Err() == nil {
				t0 := time.Now()
				if limit <= 0 && !t0.Before(deadline) {
					break
				}
				if limit > 0 && started.Add(1) > limit {
					break
				}
				switch s.send(ctx, s.next.Add(1)) {
				case okAnswer:
					ok++
					lat = append(lat, time.Since(t0))
				case badStatus:
					bad++
				default:
					tr++
				}
			}
			mu.Lock()
			res.merge(lat, ok, bad, tr)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Rate = float64(res.OK) / res.Elapsed.Seconds()
	return res
}

// openLoop sends at a fixed rate for d: request i is due at start + i/rate,
// whatever happened to the earlier ones, and its latency is measured from
// that scheduled time, so a slow answer that delays later sends shows in
// their latencies too (no coordinated omission). At most maxInFlight
// requests are outstanding; a schedule that needs more shows as latency.
// sent, if not nil, is called with each request's index and actual send
// time.
func (s *sender) openLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, sent, answered func(i int64, at time.Time)) loadResult {
	var (
		res  loadResult
		mu   sync.Mutex
		wg   sync.WaitGroup
		next atomic.Int64
	)
	total := int64(rate * d.Seconds())
	interval := float64(time.Second) / rate
	first := s.next.Add(total) - total + 1 // reserve the ids
	start := time.Now().Add(10 * time.Millisecond)
	for w := 0; w < maxInFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			var ok, bad, tr int
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= total {
					break
				}
				due := start.Add(time.Duration(float64(k) * interval))
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
				if sent != nil {
					sent(first+k, time.Now())
				}
				switch s.send(ctx, first+k) {
				case okAnswer:
					if answered != nil {
						answered(first+k, time.Now())
					}
					ok++
					lat = append(lat, time.Since(due))
				case badStatus:
					bad++
				default:
					tr++
				}
			}
			mu.Lock()
			res.merge(lat, ok, bad, tr)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Rate = float64(res.OK) / res.Elapsed.Seconds()
	return res
}

// percentiles of a sample, by sorting it (nearest rank).
type percentiles struct {
	sorted []time.Duration
}

func newPercentiles(lat []time.Duration) percentiles {
	s := slices.Clone(lat)
	slices.Sort(s)
	return percentiles{sorted: s}
}

// at returns the q-quantile (0 < q ≤ 1); 0 for an empty sample.
func (p percentiles) at(q float64) time.Duration {
	n := len(p.sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(n))) - 1
	i = max(0, min(i, n-1))
	return p.sorted[i]
}

func (p percentiles) max() time.Duration {
	if len(p.sorted) == 0 {
		return 0
	}
	return p.sorted[len(p.sorted)-1]
}
