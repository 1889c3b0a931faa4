package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/sharedtest"
)

// BenchmarkIntake drives signed GitHub webhooks through the real handler over
// loopback HTTP into a real store: the server-side cost of one durable
// webhook. Each X-GitHub-Delivery is random (a UUID, as GitHub sends) or, in
// the counter runs, a counter (bench-1, bench-2, …), whose dedupe index
// grows at one end and flatters an engine. The load generator shares the
// process, so a CPU profile shows both; `make bench` measures the binaries
// from outside.
//
//	go test -run '^$' -bench 'Intake/sqlite/random' -benchtime 20000x -cpu 2 ./cloud/server/
//
// guard=on and guard=off send a body of their own each (its first member
// numbered, signed per request), the one with the GitHub source's replay
// guard on (a digest looked up and stored per webhook), the other with it
// off (the default): the guard's cost.
func BenchmarkIntake(b *testing.B) {
	for _, ids := range []string{"random", "counter"} {
		b.Run("sqlite/"+ids, func(b *testing.B) {
			st := sqlitetest.Open(b)
			benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 1}), ids == "random", "", 0)
		})
		b.Run("postgres/"+ids, func(b *testing.B) {
			st, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
			require.NoError(b, err)
			benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 2}), ids == "random", "", 0) // as the cloud runs it
		})
	}
	// fanout=5: the same webhooks to a group of five hosts with a fanout
	// source (a delivery per member, one body), against sqlite/random.
	b.Run("sqlite/fanout=5", func(b *testing.B) {
		st := sqlitetest.Open(b)
		benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 1}), true, "", 5)
	})
	b.Run("postgres/fanout=5", func(b *testing.B) {
		st, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
		require.NoError(b, err)
		benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 2}), true, "", 5)
	})
	for _, guard := range []string{"on", "off"} {
		b.Run("sqlite/guard="+guard, func(b *testing.B) {
			st := sqlitetest.Open(b)
			benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 1}), true, guard, 0)
		})
		b.Run("postgres/guard="+guard, func(b *testing.B) {
			st, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
			require.NoError(b, err)
			benchIntake(b, store.GroupCommit(st, store.GroupOptions{Flushers: 2}), true, guard, 0)
		})
	}
}

// benchIntake takes st migrated, as cloud serve wraps it: with group commit.
// random: each delivery id a random UUID, else a counter. guard "": one
// body for every request, the replay guard off (it would hold them); "on"
// or "off": a body of its own each, with the guard so. fanout > 0: to a
// group of that many hosts whose source is fanout, not to a host.
func benchIntake(b *testing.B, st store.Store, random bool, guard string, fanout int) {
	s := testServer(b, st, clockwork.NewRealClock(), nil, Config{AdminToken: testAdmin, RateLimitPerMin: 1 << 30})
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(func() { srv.Close(); st.Close() })

	admin := func(method, path, body string) []byte {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+testAdmin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		require.Less(b, resp.StatusCode, 300, string(out))
		return out
	}
	var h shared.CreateHostResponse
	require.NoError(b, json.Unmarshal(admin("POST", "/api/hosts", `{"name":"bench"}`), &h))
	option := guard
	if option == "" {
		option = "off"
	}
	admin("PUT", "/api/hosts/"+h.ID+"/sources/github", `{"secrets":["`+testSecret+`"],"options":{"replay_guard":"`+option+`"}}`)
	id := h.ID
	if fanout > 0 {
		var g shared.Group
		require.NoError(b, json.Unmarshal(admin("POST", "/api/groups", `{"name":"bench"}`), &g))
		for i := range fanout {
			var m shared.CreateHostResponse
			require.NoError(b, json.Unmarshal(admin("POST", "/api/hosts", fmt.Sprintf(`{"name":"member %d"}`, i)), &m))
			admin("PUT", "/api/groups/"+g.ID+"/members/"+m.ID, "")
		}
		admin("PUT", "/api/groups/"+g.ID+"/sources/github", `{"mode":"fanout","secrets":["`+testSecret+`"]}`)
		id = g.ID
	}

	body, err := os.ReadFile("testdata/installation.created.json")
	require.NoError(b, err)
	m := hmac.New(sha256.New, []byte(testSecret))
	m.Write(body)
	sig := "sha256=" + hex.EncodeToString(m.Sum(nil))
	url := srv.URL + "/api/webhooks/" + id + "/github"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}

	var seq atomic.Int64
	b.SetBytes(int64(len(body)))
	b.SetParallelism(32) // × GOMAXPROCS concurrent senders
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			send, signature := body, sig
			if guard != "" {
				// {"n":N, and the rest of the payload: a body of its own.
				send = append([]byte(`{"n":`+strconv.FormatInt(n, 10)+`,`), body[1:]...)
				m := hmac.New(sha256.New, []byte(testSecret))
				m.Write(send)
				signature = "sha256=" + hex.EncodeToString(m.Sum(nil))
			}
			req, _ := http.NewRequest("POST", url, bytes.NewReader(send))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "installation")
			delivery := "bench-" + strconv.FormatInt(n, 10)
			if random {
				delivery = sharedtest.DeliveryUUID()
			}
			req.Header.Set("X-GitHub-Delivery", delivery)
			req.Header.Set("X-Hub-Signature-256", signature)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "webhooks/s")
	// The process's: the senders' share too (about a third for one host).
	b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/webhook")
}

// BenchmarkHeartbeatDrain is the cloud's side of draining a backlog to one
// host: heartbeats of 500 that ack the previous batch and lease the next,
// as the host sends them (gzip accepted), over loopback into a real store.
//
//	go test -run '^$' -bench HeartbeatDrain -benchtime 50000x ./cloud/server/
func BenchmarkHeartbeatDrain(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		st := sqlitetest.Open(b)
		benchDrain(b, st)
	})
	b.Run("postgres", func(b *testing.B) {
		st, err := postgres.Open(context.Background(), pgtest.NewDatabase(b))
		require.NoError(b, err)
		benchDrain(b, st)
	})
	// A database across a network, as production Postgres usually is: a
	// proxy adds 1 ms each way (a 2 ms round trip, as to another zone).
	b.Run("postgres-2ms-rtt", func(b *testing.B) {
		st, err := postgres.Open(context.Background(), throughLatency(b, pgtest.NewDatabase(b), time.Millisecond))
		require.NoError(b, err)
		benchDrain(b, st)
	})
}

// throughLatency returns dbURL reached through an in-process proxy that
// delays what it carries by delay (whole milliseconds) in each direction.
func throughLatency(b *testing.B, dbURL string, delay time.Duration) string {
	u, err := url.Parse(dbURL)
	require.NoError(b, err)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", u.Host)
	require.NoError(b, p.Start())
	b.Cleanup(p.Stop)
	for _, stream := range []string{"upstream", "downstream"} {
		_, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name": "latency-%s", "type": "latency", "stream": %q, "attributes": {"latency": %d}}`,
			stream, stream, delay.Microseconds()/1000)))
		require.NoError(b, err)
	}
	u.Host = p.Listen
	return u.String()
}

func benchDrain(b *testing.B, st store.Store) {
	ctx := context.Background()
	s := testServer(b, st, clockwork.NewRealClock(), nil, Config{AdminToken: testAdmin})
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(func() { srv.Close(); st.Close() })
	post := func(path, token string, in, out any) {
		body, _ := json.Marshal(in)
		req, _ := http.NewRequest("POST", srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req) // asks for gzip, as the host does
		require.NoError(b, err)
		defer resp.Body.Close()
		require.Less(b, resp.StatusCode, 300)
		require.NoError(b, json.NewDecoder(resp.Body).Decode(out))
	}
	var h shared.CreateHostResponse
	post("/api/hosts", testAdmin, map[string]string{"name": "drain"}, &h)
	var claim shared.ClaimResponse
	post("/api/hosts/claim", "", shared.ClaimRequest{ClaimCode: h.ClaimCode}, &claim)

	body, err := os.ReadFile("testdata/installation.created.json")
	require.NoError(b, err)
	now := time.Now()
	for done := 0; done < b.N; {
		ps := make([]*store.DeliveryInsertParams, 0, 500)
		for i := 0; i < 500 && done < b.N; i++ {
			id := "evt-" + strconv.Itoa(done)
			ps = append(ps, &store.DeliveryInsertParams{ID: "github:" + id, HostID: h.ID, Source: "github", EventID: id,
				EventType: "installation", EventAction: "created", RawBody: body, ReceivedAt: now,
				Headers: map[string]string{"x-github-event": "installation", "x-github-delivery": id, "content-type": "application/json"}})
			done++
		}
		_, err := st.DeliveryInsertBatch(ctx, ps)
		require.NoError(b, err)
	}

	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	var acks []string
	var results []shared.WebhookResult
	status := 200
	for got := 0; got < b.N; {
		var resp shared.HeartbeatResponse
		// As the host asks: the raw body only, no parsed copy; each ack with
		// its ledger's result.
		post(shared.PathHeartbeat, claim.Token, shared.HeartbeatRequest{WebhookAcks: acks, WebhookResults: results,
			MaxWebhooks: shared.Ptr(500), RawBodyOnly: true}, &resp)
		acks, results = acks[:0], results[:0]
		for _, w := range resp.Webhooks {
			acks = append(acks, w.DeliveryID)
			results = append(results, shared.WebhookResult{DeliveryID: w.DeliveryID, Attempt: w.Attempt, Result: "success",
				Handler: "forward http://127.0.0.1:3000/hook", ResponseStatus: &status, DurationMS: 3})
		}
		got += len(resp.Webhooks)
		if len(resp.Webhooks) == 0 {
			b.Fatalf("nothing leased after %d of %d", got, b.N)
		}
	}
	var resp shared.HeartbeatResponse
	post(shared.PathHeartbeat, claim.Token, shared.HeartbeatRequest{WebhookAcks: acks, WebhookResults: results, MaxWebhooks: shared.Ptr(0)}, &resp)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}
