package transport

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/sharedtest"
)

// BenchmarkHeartbeatAnswer is the encoding of a long poll's answer of one
// webhook (a 14 KiB body, the bench's mean), gzip-compressed as the host
// asks for it.
//
//	go test -run '^$' -bench HeartbeatAnswer -benchmem ./cloud/transport/
func BenchmarkHeartbeatAnswer(b *testing.B) {
	s := &Transports{}
	body := bytes.Repeat([]byte(`{"ref":"refs/heads/main","commits":[{"id":"0123456789abcdef","message":"fix: a thing"}]},`), 14<<10/90)
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, Now: time.Now(), LeaseS: 120,
		Webhooks: []shared.Webhook{{DeliveryID: "github:72d3162e:1", Source: "github", EventType: "push",
			Headers: map[string]string{"content-type": "application/json", "x-github-event": "push"}, RawBody: body, Attempt: 1}}}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		c.Request = httptest.NewRequest("POST", "/api/hosts/heartbeat", nil)
		c.Request.Header.Set("Accept-Encoding", "gzip")
		if err := s.writeJSON(c, 200, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeatAnswerEncodings writes a heartbeat answer as the
// handler does: "json-gzip" (writeJSON, the host asking gzip), "json"
// (writeJSON, uncompressed) and "binary" (writeBinaryAnswer), for the long
// poll's answer of one webhook of the payload mix and a drain's batch of
// 100 (scripts/bench/testdata in turn, one a 300 KB push).
//
//	go test -run '^$' -bench HeartbeatAnswerEncodings -benchmem -benchtime 200x -count 3 ./cloud/transport/
//
// Medians of three on 2 shared cores (load 2.3): one webhook 112 µs
// json-gzip (4,518 bytes sent), 34 µs json (15,238), 21 µs binary
// (11,630); the batch of 100 (1.34 MB of bodies) 11.6 ms json-gzip
// (258 KB), 3.1 ms json (1.85 MB), 1.26 ms binary (1.40 MB, 33 allocations
// against 1,637).
func BenchmarkHeartbeatAnswerEncodings(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	s := &Transports{}
	for _, batch := range sharedtest.BenchBatches(b) {
		resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 30, Webhooks: batch.Hooks, Now: time.Now(), LeaseS: 120, PollWhileBusy: true}
		for _, enc := range []string{"json-gzip", "json", "binary"} {
			b.Run(batch.Name+"/"+enc, func(b *testing.B) {
				b.SetBytes(int64(batch.Bytes))
				b.ReportAllocs()
				var sent int
				for range b.N {
					w := httptest.NewRecorder()
					c, _ := gin.CreateTestContext(w)
					c.Request = httptest.NewRequest("POST", "/api/hosts/heartbeat", nil)
					c.Request.Header.Set("Accept-Encoding", "gzip")
					var err error
					switch enc {
					case "binary":
						err = s.writeBinaryAnswer(c, &resp)
					case "json":
						c.Request.Header.Del("Accept-Encoding")
						fallthrough
					default:
						err = s.writeJSON(c, 200, resp)
					}
					if err != nil {
						b.Fatal(err)
					}
					sent = w.Body.Len()
				}
				b.ReportMetric(float64(sent), "answer-bytes")
			})
		}
	}
}
