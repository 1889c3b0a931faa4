package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// sender posts signed webhooks to one host's sources, as providers send
// them: each request is a payload of the mix (GitHub's and Stripe's, a
// few hundred bytes to 300 KB) with its own event id (the cloud's dedupe
// key) in the provider's shape, and a share of them (-dup) replays one
// already accepted, as a provider retries.
type sender struct {
	client  *http.Client
	urls    map[string]string // by provider
	mix     *payloadMix
	ids     *ids
	dup     float64
	replays *replays
	next    atomic.Int64
	dups    atomic.Int64 // replays answered 2xx
}

func newSender(cloudURL, hostID string, conns int, mix *payloadMix, ids *ids, dup float64) *sender {
	s := &sender{
		client:  &http.Client{Timeout: 60 * time.Second, Transport: newTransport(conns)},
		urls:    map[string]string{},
		mix:     mix,
		ids:     ids,
		dup:     dup,
		replays: newReplays(4096),
	}
	for _, p := range mix.providers() {
		s.urls[p] = rig.WebhookURL(cloudURL, hostID, p)
	}
	return s
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

// webhook makes request i: a new webhook of the mix, or with the -dup
// share a replay of one already accepted (replayed true).
func (s *sender) webhook(i int64) (w webhook, replayed bool) {
	if s.dup > 0 && chance(i) < s.dup {
		if w, ok := s.replays.pick(uint64(i)); ok {
			return w, true
		}
	}
	k := s.mix.kindOf(i)
	return k.build(s.ids.next(k.provider, i), time.Now()), false
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
	w, replayed := s.webhook(i)
	return s.post(ctx, w, replayed)
}

// post sends w and reports how it went.
func (s *sender) post(ctx context.Context, w webhook, replayed bool) outcome {
	req, err := http.NewRequestWithContext(ctx, "POST", s.urls[w.provider], bytes.NewReader(w.body))
	if err != nil {
		return transport
	}
	req.Header = w.header.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		return transport
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return badStatus
	}
	if replayed {
		s.dups.Add(1)
	} else if s.dup > 0 {
		s.replays.add(w)
	}
	return okAnswer
}

// close drops the sender's idle connections.
func (s *sender) close() { s.client.CloseIdleConnections() }

// loadResult is what a load run measured.
type loadResult struct {
	OK, BadStatus, Transport int
	Dups                     int // of OK: replays of accepted webhooks (-dup)
	Elapsed                  time.Duration
	Lat                      []time.Duration // of the 2xx answers
	Rate                     float64         // 2xx answers per second of Elapsed
}

// count adds one answer of a worker: its outcome, and for a 2xx answer its
// latency.
func (r *loadResult) count(o outcome, lat time.Duration) {
	switch o {
	case okAnswer:
		r.OK++
		r.Lat = append(r.Lat, lat)
	case badStatus:
		r.BadStatus++
	default:
		r.Transport++
	}
}

func (r *loadResult) merge(w *loadResult) {
	r.Lat = append(r.Lat, w.Lat...)
	r.OK += w.OK
	r.BadStatus += w.BadStatus
	r.Transport += w.Transport
}

// load runs workers goroutines, each calling step with its own tally until
// step returns false or ctx ends, and sums their tallies into what the run
// measured from start.
func (s *sender) load(ctx context.Context, workers, latCap int, start time.Time, step func(w *loadResult) bool) loadResult {
	var (
		res loadResult
		mu  sync.Mutex
		wg  sync.WaitGroup
	)
	dups0 := s.dups.Load()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := loadResult{Lat: make([]time.Duration, 0, latCap)}
			for ctx.Err() == nil && step(&w) {
			}
			mu.Lock()
			res.merge(&w)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Dups = int(s.dups.Load() - dups0)
	res.Elapsed = time.Since(start)
	res.Rate = float64(res.OK) / res.Elapsed.Seconds()
	return res
}

// closedLoop runs conc workers that each send, wait for the answer and send
// again, for d (or until limit requests were started, if limit > 0).
func (s *sender) closedLoop(ctx context.Context, conc int, d time.Duration, limit int64) loadResult {
	var started atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	return s.load(ctx, conc, 4096, start, func(w *loadResult) bool {
		t0 := time.Now()
		if limit <= 0 && !t0.Before(deadline) {
			return false
		}
		if limit > 0 && started.Add(1) > limit {
			return false
		}
		o := s.send(ctx, s.next.Add(1))
		w.count(o, time.Since(t0))
		return true
	})
}

// openLoop sends at a fixed rate for d: request i is due at start + i/rate,
// whatever happened to the earlier ones, and its latency is measured from
// that scheduled time, so a slow answer that delays later sends shows in
// their latencies too (no coordinated omission). At most maxInFlight
// requests are outstanding; a schedule that needs more shows as latency.
// sent, if not nil, is called with each new webhook's event id, body size
// and actual send time (not with replays); answered, if not nil, with its
// event id and when its 2xx answer came.
func (s *sender) openLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, sent func(id string, size int, at time.Time), answered func(id string, at time.Time)) loadResult {
	var next atomic.Int64
	total := int64(rate * d.Seconds())
	interval := float64(time.Second) / rate
	first := s.next.Add(total) - total + 1 // reserve the indexes
	start := time.Now().Add(10 * time.Millisecond)
	return s.load(ctx, maxInFlight, 1024, start, func(lr *loadResult) bool {
		k := next.Add(1) - 1
		if k >= total {
			return false
		}
		due := start.Add(time.Duration(float64(k) * interval))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		w, replayed := s.webhook(first + k)
		if sent != nil && !replayed {
			sent(w.id, len(w.body), time.Now())
		}
		o := s.post(ctx, w, replayed)
		if o == okAnswer && answered != nil && !replayed {
			answered(w.id, time.Now())
		}
		lr.count(o, time.Since(due))
		return true
	})
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
