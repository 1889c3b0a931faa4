package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/shared"
)

// TestReplicas runs three `cloud serve` processes on one Postgres, as
// several replicas behind a load balancer would. Two hosts heartbeat
// through a round-robin balancer, so consecutive heartbeats (and the acks
// they carry) land on different replicas — or keep a socket to one replica
// while the webhooks come to the others (LISTEN/NOTIFY wakes it) — while
// 2,000 signed webhooks are sent to the replicas in turn. Every replica
// runs the background jobs. Every webhook reaches a handler exactly once (counted by Idempotency-Key)
// and is handed out once (one attempt each), and in the end every delivery
// is acked: nothing stuck, nothing dead-lettered.
func TestReplicas(t *testing.T) {
	for _, transport := range []string{"heartbeat", "websocket"} {
		t.Run(transport, func(t *testing.T) { testReplicas(t, transport) })
	}
}

func testReplicas(t *testing.T, transport string) {
	dbURL := pgtest.NewDatabase(t)
	sharedEnv := []string{
		"RELAY_JWT_KEY=" + "replicas-share-this-jwt-key-of-32+-bytes",
		"RELAY_SECRET_KEYS=" + base64.StdEncoding.EncodeToString([]byte("replicas share this 32-byte key!")),
		"RELAY_LOG_LEVEL=info",
		"RELAY_LEASE=30s",
	}
	var replicas []*cloud
	for range 3 {
		replicas = append(replicas, startCloud(t, dbURL, sharedEnv...))
	}
	urls := make([]string, len(replicas))
	for i, c := range replicas {
		urls[i] = c.url
	}
	// Each replica counts the three in its roll call before any host
	// polls: none parks an answered long poll for a next poll that may go
	// to another. (A replica that started first counts itself alone until
	// its next call; a poll it parks in that window gives back what it
	// holds when the host's next poll goes elsewhere, an attempt spent and
	// given back: docs/deploy.md, several replicas.)
	for i, c := range replicas {
		eventually(t, 3*delivery.RollCallEvery, fmt.Sprintf("replica %d counts three", i), func() bool {
			return metricValue(c.metrics(), "relay_replicas") == float64(len(replicas))
		})
	}

	rc := startReceiver(t)
	type hostRun struct {
		id string
		lb *balancer
	}
	var hosts []hostRun
	for i := range 2 {
		// Hosts are made on one replica and claimed through another.
		id, code := replicas[i].newHost(fmt.Sprintf("replica-host-%d", i), secret)
		require.Equal(t, 200, replicas[2-i].admin("PATCH", "/api/hosts/"+id,
			map[string]any{"rate_limit_per_min": 1_000_000, "rate_limit_burst": 1_000_000}, nil))
		lb := startBalancer(t, urls, i)
		startReplicaHost(t, lb.url, code, rc.url, transport)
		hosts = append(hosts, hostRun{id: id, lb: lb})
	}

	const total = 2000
	body := githubPayloads(t)[0]
	started := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				h := hosts[i%len(hosts)]
				w := signGitHub(secret, body.event, fmt.Sprintf("rep-%05d", i), body.body)
				status, resp, err := w.send(urls[i%len(urls)], h.id)
				switch {
				case err != nil:
					errs <- err
				case status != 200 || resp.Status != shared.IntakeQueued:
					errs <- fmt.Errorf("webhook %d: %d %+v", i, status, resp)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	sent := time.Since(started)

	eventually(t, 50*time.Second, "every webhook acked", func() bool {
		acked := 0
		for _, c := range hostCounts(t, replicas[0]) {
			acked += c["acked"]
		}
		return acked == total
	})
	done := time.Since(started)

	// Exactly once at the handlers.
	got := rc.snapshot()
	require.Len(t, got, total, "every webhook reached a handler")
	for key, reqs := range got {
		require.Len(t, reqs, 1, "%s handled %d times", key, len(reqs))
	}
	// Nothing stuck, nothing dead-lettered, as every replica sees it.
	for _, c := range replicas {
		counts := hostCounts(t, c)
		require.Len(t, counts, len(hosts))
		for id, byStatus := range counts {
			require.Equal(t, map[string]int{
				"queued": 0, "delivering": 0, "delivered": 0, "acked": total / len(hosts), "retrying": 0, "dlq": 0,
			}, byStatus, "host %s", id)
		}
	}
	// Handed out once each: no replica leased a delivery another held.
	for _, h := range hosts {
		ds := replicas[1].deliveries(h.id, "acked")
		require.Len(t, ds, total/len(hosts))
		for _, d := range ds {
			require.Equal(t, 1, d.Attempts, d.DeliveryID)
		}
	}
	var spread []int64
	for _, h := range hosts {
		spread = append(spread, h.lb.counts()...)
	}
	t.Logf("%d webhooks over %d replicas: sent in %s, all handled and acked after %s; host requests per replica %v",
		total, len(replicas), sent.Round(time.Millisecond), done.Round(time.Millisecond), spread)
}

// hostCounts is every host's deliveries by status, from GET /api/hosts.
func hostCounts(t *testing.T, c *cloud) map[string]map[string]int {
	t.Helper()
	var list struct {
		Hosts []struct {
			ID     string         `json:"id"`
			Counts map[string]int `json:"counts"`
		} `json:"hosts"`
	}
	require.Equal(t, 200, c.admin("GET", "/api/hosts", nil, &list))
	out := map[string]map[string]int{}
	for _, h := range list.Hosts {
		out[h.ID] = h.Counts
	}
	return out
}

// startReplicaHost claims a host through url and runs it on transport with
// 32 workers and a forward handler for the github source.
func startReplicaHost(t *testing.T, url, code, forward, transport string) {
	t.Helper()
	startHost(t, url, code, forwardTo(forward, map[string]any{"transport": transport, "workers": 32}))
}

// balancer is a round-robin HTTP load balancer: each request goes to the
// next replica.
type balancer struct {
	url  string
	hits []atomic.Int64
}

func startBalancer(t *testing.T, targets []string, first int) *balancer {
	t.Helper()
	parsed := make([]*url.URL, len(targets))
	for i, s := range targets {
		u, err := url.Parse(s)
		require.NoError(t, err)
		parsed[i] = u
	}
	b := &balancer{hits: make([]atomic.Int64, len(targets))}
	var turn atomic.Int64
	turn.Store(int64(first))
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		i := int(turn.Add(1)-1) % len(parsed)
		b.hits[i].Add(1)
		r.SetURL(parsed[i])
	}}
	b.url = serveLocal(t, proxy)
	return b
}

func (b *balancer) counts() []int64 {
	out := make([]int64, len(b.hits))
	for i := range b.hits {
		out[i] = b.hits[i].Load()
	}
	return out
}
