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
	"github.com/relaykit/relay/shared"
)

// receiver decides the local app's answers and counts its successes. Each
// host forwards to a path of its own (/hook/HOST_ID), so the receiver
// knows which host ran what.
type receiver struct {
	mu      sync.Mutex
	ok      map[string][]string   // a host's own webhook: Idempotency-Key → the hosts answered 200
	runs    map[string][]groupRun // a group's webhook: event id → each 200 answered
	fixed   map[string]bool       // doomed deliveries the app now accepts
	allFix  bool
	byHands int
}

func newReceiver() *receiver {
	return &receiver{ok: map[string][]string{}, runs: map[string][]groupRun{}, fixed: map[string]bool{}}
}

// answer: a "flaky" event fails its first attempt, a "doomed" one every
// attempt until fixed; the rest succeed.
func (rc *receiver) answer(r *http.Request, key string, n int) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case strings.Contains(key, "doomed") && !rc.fixed[key] && !rc.allFix:
		return http.StatusInternalServerError
	case strings.Contains(key, "flaky") && n == 1:
		return http.StatusServiceUnavailable
	}
	member := strings.TrimPrefix(r.URL.Path, "/hook/")
	if g := r.Header.Get(shared.HeaderGroup); g != "" {
		ev := r.Header.Get("X-GitHub-Delivery")
		rc.runs[ev] = append(rc.runs[ev], groupRun{key: key, member: member, group: g})
	} else {
		rc.ok[key] = append(rc.ok[key], member)
	}
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

// successes are the 200s answered: to hosts' own webhooks by
// Idempotency-Key, to groups' by event id.
func (rc *receiver) successes() (hosts map[string][]string, groups map[string][]groupRun) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	hosts = make(map[string][]string, len(rc.ok))
	for k, v := range rc.ok {
		hosts[k] = append([]string(nil), v...)
	}
	groups = make(map[string][]groupRun, len(rc.runs))
	for k, v := range rc.runs {
		groups[k] = append([]groupRun(nil), v...)
	}
	return hosts, groups
}

// sender posts signed webhooks at a steady rate, as providers would: a
// non-2xx answer or a transport error is retried (same event) a few times.
// Of every ten webhooks to a cloud, eight go to its hosts' own URLs (the
// hosts and providers in turn), one to its fanout group's and one to its
// any group's (GitHub).
type sender struct {
	engines []*engine
	rate    float64

	mu       sync.Mutex
	sent     int
	accepted map[string]string // a host's own webhook answered 2xx: delivery id → host id
	groupOK  map[string]*group // a group's webhook answered 2xx: event id → group
	sentTo   map[string]*group // every group's webhook sent: event id → group
	gaveUp   int
	why      map[string]int // the last answer of those given up
}

// target is where one webhook goes: a host's or a group's URL.
type target struct {
	id     string // host or group id
	source string
	group  *group // nil for a host
}

func (s *sender) run(ctx context.Context) {
	s.accepted, s.groupOK, s.sentTo, s.why = map[string]string{}, map[string]*group{}, map[string]*group{}, map[string]int{}
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
		j := i / len(s.engines)
		var to target
		switch j % 10 {
		case 8:
			to = target{id: e.fanout.id, source: "github", group: e.fanout}
		case 9:
			to = target{id: e.any.id, source: "github", group: e.any}
		default:
			k := j - 2*(j/10) // the hosts' own webhooks, counted alone
			to = target{id: e.ids[k%len(e.ids)], source: providers[(k/len(e.ids))%len(providers)]}
		}
		kind := "ok"
		switch x := rng.IntN(100); {
		case x < 1:
			kind = "doomed"
		case x < 6:
			kind = "flaky"
		}
		id := fmt.Sprintf("soak-%s-%d", kind, i)
		if to.group != nil {
			s.mu.Lock()
			s.sentTo[id] = to.group
			s.mu.Unlock()
		}
		wg.Go(func() { s.send(ctx, client, e, to, id) })
	}
}

func (s *sender) send(ctx context.Context, client *http.Client, e *engine, to target, id string) {
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
		switch to.source {
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
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), "POST", rig.WebhookURL(e.cloud.Admin.URL, to.id, to.source), strings.NewReader(string(body)))
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
			if to.group != nil {
				s.groupOK[id] = to.group
			} else {
				s.accepted[ans.DeliveryID] = to.id
			}
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
	return s.sent, len(s.accepted) + len(s.groupOK), s.gaveUp, strings.Join(w, ", ")
}

// acceptedKeys are the webhooks answered 2xx: the hosts' own by delivery
// id (→ host id), the groups' by event id (→ group).
func (s *sender) acceptedKeys() (hosts map[string]string, groups map[string]*group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.groupOK
}

// groupEvents are the events sent to a group's URL, answered or not.
func (s *sender) groupEvents() map[string]*group {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sentTo
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
// retrying dead letters by hand meanwhile, and returns what is left by
// engine, what took it (hosts' own URLs, a group's) and status (sentTo:
// the events sent to groups).
func drain(ctx context.Context, engines []*engine, rc *receiver, sentTo map[string]*group) (map[string]int, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		left := 0
		for _, e := range engines {
			for _, id := range e.ids {
				counts, err := e.cloud.Counts(ctx, id)
				if err != nil {
					return nil, err
				}
				for st, c := range counts {
					if st != "acked" {
						left += c
					}
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return leftOver(ctx, engines, sentTo)
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
