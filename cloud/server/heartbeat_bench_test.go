package server

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/shared"
)

// BenchmarkHeartbeatAnswer is the encoding of a long poll's answer of one
// webhook (a 14 KiB body, the bench's mean), gzip-compressed as the host
// asks for it.
//
//	go test -run '^$' -bench HeartbeatAnswer -benchmem ./cloud/server/
func BenchmarkHeartbeatAnswer(b *testing.B) {
	s := &Server{}
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
