package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// intakeAnswer is the cloud's JSON answer to a webhook.
type intakeAnswer struct {
	DeliveryID string `json:"delivery_id"`
	Status     string `json:"status"`
}

// sendRecord is the sender's log of one event: every 2xx answer it got.
type sendRecord struct {
	eventID  string
	host     *relayHost
	tries    int
	ok       bool      // got a 2xx
	okAt     time.Time // the first 2xx
	answers  []intakeAnswer
	lastFail string // the last non-2xx answer or transport error
}

// tryLog is one request of the sender.
type tryLog struct {
	sent, done time.Time
	status     int // 0: transport error
}

// sender behaves like a provider that retries: each event goes to a cloud
// (alternating between targets); a non-2xx answer or a transport error is
// retried with the same event id, on the next target, after a short backoff,
// until the event's deadline.
type sender struct {
	targets  []string // cloud base URLs
	hosts    []*relayHost
	prefix   string
	n        int
	rate     float64       // events started per second; 0: as fast as the workers go
	workers  int           // events in flight at most
	deadline time.Duration // per event, from its first try

	client  *http.Client
	records []*sendRecord
	started atomic.Int64

	mu   sync.Mutex
	log  []tryLog
	done chan struct{}
}

func newSender(targets []string, hosts []*relayHost, prefix string, n int, rate float64, deadline time.Duration) *sender {
	s := &sender{targets: targets, hosts: hosts, prefix: prefix, n: n, rate: rate, workers: 24, deadline: deadline,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
		}},
		done: make(chan struct{}),
	}
	s.records = make([]*sendRecord, n)
	for i := range n {
		s.records[i] = &sendRecord{eventID: fmt.Sprintf("%s-%05d", prefix, i), host: hosts[i%len(hosts)]}
	}
	return s
}

// body is the event's payload: a push, naming its event and host so that a
// receiver can tell whose it is.
func (s *sender) body(i int) []byte {
	r := s.records[i]
	sum := sha256.Sum256([]byte(r.eventID))
	return fmt.Appendf(nil, `{"ref":"refs/heads/main","after":"%s","repository":{"full_name":"relaykit/chaos"},`+
		`"pusher":{"name":"chaos"},"chaos":{"event":%q,"host":%q,"seq":%d}}`, hex.EncodeToString(sum[:20]), r.eventID, r.host.id, i)
}

// start sends in the background; wait blocks until every event got a 2xx or
// its deadline passed.
func (s *sender) start(ctx context.Context) {
	next := make(chan int)
	go func() {
		defer close(next)
		t0 := time.Now()
		for i := range s.n {
			if s.rate > 0 {
				at := t0.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))
				if d := time.Until(at); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case next <- i:
			}
		}
	}()
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for i := range next {
				s.started.Add(1)
				s.send(ctx, i)
			}
		})
	}
	go func() { wg.Wait(); close(s.done) }()
}

func (s *sender) wait() { <-s.done }

// send delivers event i, retrying like a provider.
func (s *sender) send(ctx context.Context, i int) {
	r := s.records[i]
	body := s.body(i)
	sig := rig.GitHubSignature(r.host.secret, body)
	deadline := time.Now().Add(s.deadline)
	backoff := 50 * time.Millisecond
	for try := 0; ; try++ {
		target := s.targets[(i+try)%len(s.targets)]
		status, ans, err := s.post(ctx, target, r, body, sig)
		r.tries++
		if err == nil && status >= 200 && status < 300 {
			r.ok, r.okAt = true, time.Now()
			r.answers = append(r.answers, ans)
			return
		}
		if err != nil {
			r.lastFail = err.Error()
		} else {
			r.lastFail = fmt.Sprintf("HTTP %d", status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 800*time.Millisecond)
	}
}

func (s *sender) post(ctx context.Context, base string, r *sendRecord, body []byte, sig string) (int, intakeAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/webhooks/"+r.host.id+"/github", bytes.NewReader(body))
	if err != nil {
		return 0, intakeAnswer{}, err
	}
	req.Header = rig.GitHubHeaders("push", r.eventID, sig)
	sent := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		s.logTry(sent, 0)
		return 0, intakeAnswer{}, shortErr(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s.logTry(sent, resp.StatusCode)
	var ans intakeAnswer
	_ = json.Unmarshal(b, &ans)
	return resp.StatusCode, ans, nil
}

func (s *sender) logTry(sent time.Time, status int) {
	s.mu.Lock()
	s.log = append(s.log, tryLog{sent: sent, done: time.Now(), status: status})
	s.mu.Unlock()
}

// tries returns the log of every request so far.
func (s *sender) tries() []tryLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]tryLog(nil), s.log...)
}

// shortErr keeps the end of a transport error (the cause).
func shortErr(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i > 0 && len(msg) > 80 {
		msg = msg[i+2:]
	}
	return fmt.Errorf("%s", msg)
}

// summary counts the sender's results.
func (s *sender) summary() (ok, retried, gaveUp int) {
	for _, r := range s.records[:s.started.Load()] {
		switch {
		case r.ok && r.tries > 1:
			ok++
			retried++
		case r.ok:
			ok++
		default:
			gaveUp++
		}
	}
	return
}
