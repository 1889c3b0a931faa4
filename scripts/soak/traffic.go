// Command soak is the relay's long run (`make soak`): about an hour of
// steady signed traffic, with nothing allowed to grow.
//
// Two clouds run side by side, one on SQLite and one on a throwaway
// Postgres, each with three hosts; every host has a GitHub, a Stripe and a
// Slack source forwarding to one local receiver. A sender posts signed
// webhooks at a steady rate, spread over the clouds, hosts and providers,
// and retries a non-2xx answer as a provider would. Along the way:
//
//   - a host is restarted now and then (SIGTERM, then started again);
//   - a share of the webhooks fail their first attempt at the receiver
//     (503) and are retried by the cloud's schedule;
//   - a smaller share fail until they are dead-lettered, and are then
//     retried by hand (POST …/retry), as an operator would once the app is
//     fixed;
//   - retention runs with short windows (acked and dead-lettered deliveries
//     pruned after two minutes, one in -short).
//
// Every -every (1 min; 15 s in -short) it samples, per engine: the cloud's
// RSS, goroutines and open file descriptors, the database's size and its
// WAL, the deliveries pending (queued, retrying) and in flight (delivering,
// delivered) over all hosts, and the hosts' RSS, threads and open file
// descriptors (summed over the three). It writes the samples as a table
// (SOAK.md) and a small SVG plot of each series (soak.svg) into -out.
//
// It passes when:
//
//   - every webhook was answered 2xx within five tries (the sender's);
//   - every series is flat after warm-up: the mean of its last quarter of
//     samples is at most 10 % above the mean of its second quarter, plus a
//     small absolute allowance per series (allowance, below) so that a
//     series near zero is not failed for noise;
//   - every webhook answered 2xx was handled exactly once: the receiver
//     answered 200 to exactly one forward of it (its Idempotency-Key), and
//     to none that was not answered 2xx;
//   - nothing is left that should not be: once the sender stops and the
//     last dead letters are retried, no delivery is queued, retrying,
//     delivering, delivered or dead-lettered on either cloud.
//
// Usage:
//
//	go run ./scripts/soak [-short] [-for 1h] [-every 1m] [-rate 20] [-out DIR] [-keep]
//
// -short runs for 4 minutes, sampling every 15 s (without -out it writes
// nothing but the table to stdout). The exit status is 1 when a check
// failed.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// receiver decides the local app's answers and counts its successes.
type receiver struct {
	mu      sync.Mutex
	ok      map[string]int  // Idempotency-Key → 200 answers
	fixed   map[string]bool // doomed deliveries the app now accepts
	allFix  bool
	byHands int
}

func newReceiver() *receiver {
	return &receiver{ok: map[string]int{}, fixed: map[string]bool{}}
}

// answer: a "flaky" event fails its first attempt, a "doomed" one every
// attempt until fixed; the rest succeed.
func (rc *receiver) answer(_ *http.Request, key string, n int) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case strings.Contains(key, "doomed") && !rc.fixed[key] && !rc.allFix:
		return http.StatusInternalServerError
	case strings.Contains(key, "flaky") && n == 1:
		return http.StatusServiceUnavailable
	}
	rc.ok[key]++
	return http.StatusOK
}

func (rc *receiver) fix(key string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.fixed[key] = true
}

func (rc *receiver) fixAll() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.allFix = true
}

func (rc *receiver) countHandRetry() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.byHands++
}

func (rc *receiver) handRetries() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.byHands
}

func (rc *receiver) successes() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int, len(rc.ok))
	for k, v := range rc.ok {
		out[k] = v
	}
	return out
}

// sender posts signed webhooks at a steady rate, as providers would: a
// non-2xx answer or a transport error is retried (same event) a few times.
type sender struct {
	engines []*engine
	rate    float64

	mu       sync.Mutex
	sent     int
	accepted map[string]bool // delivery ids answered 2xx
	gaveUp   int
	why      map[string]int // the last answer of those given up
}

func (s *sender) run(ctx context.Context) {
	s.accepted, s.why = map[string]bool{}, map[string]int{}
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(float64(time.Second) / s.rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e := s.engines[i%len(s.engines)]
		hi := (i / len(s.engines)) % len(e.ids)
		provider := providers[(i/len(s.engines)/len(e.ids))%len(providers)]
		kind := "ok"
		switch x := rng.IntN(100); {
		case x < 1:
			kind = "doomed"
		case x < 6:
			kind = "flaky"
		}
		id := fmt.Sprintf("soak-%s-%d", kind, i)
		wg.Go(func() { s.send(ctx, client, e, e.ids[hi], provider, id) })
	}
}

func (s *sender) send(ctx context.Context, client *http.Client, e *engine, hostID, provider, id string) {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	last := ""
	for try := range 5 {
		if try > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		var body []byte
		var header http.Header
		now := time.Now()
		switch provider {
		case "github":
			w := rig.SignGitHub(secret, "push", id, []byte(fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/app"}}`, id)))
			body, header = w.Body, w.Header
		case "stripe":
			body, header = rig.StripeWebhook(secret, id, now)
		case "slack":
			body, header = rig.SlackWebhook(secret, id, now)
		}
		// Sent even after the load ends: a provider does not drop a webhook
		// mid-retry.
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), "POST", rig.WebhookURL(e.cloud.Admin.URL, hostID, provider), strings.NewReader(string(body)))
		if err != nil {
			break
		}
		req.Header = header
		resp, err := client.Do(req)
		if err != nil {
			last = "transport error"
			continue
		}
		last = resp.Status
		var ans struct {
			DeliveryID string `json:"delivery_id"`
		}
		decodeJSON(resp, &ans)
		if resp.StatusCode/100 == 2 && ans.DeliveryID != "" {
			s.mu.Lock()
			s.accepted[ans.DeliveryID] = true
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	s.gaveUp++
	s.why[last]++
	s.mu.Unlock()
}

func (s *sender) totals() (sent, accepted, gaveUp int, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []string
	for k, v := range s.why {
		w = append(w, fmt.Sprintf("%s: %d", k, v))
	}
	return s.sent, len(s.accepted), s.gaveUp, strings.Join(w, ", ")
}

func (s *sender) acceptedKeys() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// restartHosts restarts one host every interval, round robin, gracefully
// (SIGTERM, then a fresh start on the same state), and returns how many.
func restartHosts(ctx context.Context, engines []*engine, every time.Duration) int {
	n := 0
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(every):
		}
		e := engines[i%len(engines)]
		h := e.hosts[(i/len(engines))%len(e.hosts)]
		if err := h.Stop(15 * time.Second); err != nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
		}
		if err := h.Start(); err != nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
			continue
		}
		if err := h.WaitReady(ctx, 30*time.Second); err != nil && ctx.Err() == nil {
			fmt.Printf("restart %s host: %v\n", e.name, err)
		}
		n++
	}
}

// retryDeadLetters retries every dead-lettered delivery by hand each
// interval, once the app accepts it, and returns how many.
func retryDeadLetters(ctx context.Context, engines []*engine, rc *receiver, every time.Duration) int {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(every):
		}
		n += retryDLQ(ctx, engines, rc)
	}
}

func retryDLQ(ctx context.Context, engines []*engine, rc *receiver) int {
	n := 0
	for _, e := range engines {
		for _, id := range e.ids {
			dead, err := e.cloud.Deliveries(ctx, id, "dlq")
			if err != nil {
				continue
			}
			for _, d := range dead {
				rc.fix(d.DeliveryID)
				if err := e.cloud.Do(ctx, "POST", "/api/hosts/"+id+"/webhooks/"+d.DeliveryID+"/retry", nil, nil); err == nil {
					n++
				}
			}
		}
	}
	return n
}

// drain waits (up to 5 min) until no delivery is left but acked ones,
// retrying dead letters by hand meanwhile, and returns what is left.
func drain(ctx context.Context, engines []*engine, rc *receiver) (map[string]int, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		left := map[string]int{}
		for _, e := range engines {
			for _, id := range e.ids {
				counts, err := e.cloud.Counts(ctx, id)
				if err != nil {
					return nil, err
				}
				for st, c := range counts {
					if st != "acked" && c > 0 {
						left[e.name+" "+st] += c
					}
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left, nil
		}
		for range retryDLQ(ctx, engines, rc) {
			rc.countHandRetry()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
