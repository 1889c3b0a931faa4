package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOddBodiesArriveByteExact sends bodies a re-serializing relay would
// mangle: a GitHub form-encoded payload, JSON with CRLF line ends and
// escaped upper-case hex, and binary bytes that are not UTF-8 at all. Each
// reaches the receiver exactly as sent, with its provider headers.
func TestOddBodiesArriveByteExact(t *testing.T) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			c := startCloud(t, newDB(t))
			hostID, code := c.newHost("bytes-"+name, secret)
			require.Equal(t, 201, c.admin("PUT", "/api/hosts/"+hostID+"/sources/internal",
				map[string]any{"provider": "generic", "secrets": []string{"internal-secret"}}, nil))
			rc := startReceiver(t)
			claimAndStartHost(t, c.url, code, rc.url, "internal")

			form := []byte("payload=" + url.QueryEscape(`{"action":"opened","zen":"Keep it logically awesome."}`))
			gh := signGitHub(secret, "issues", "form-1", form)
			gh.headers["Content-Type"] = "application/x-www-form-urlencoded"
			status, ghResp, err := gh.send(c.url, hostID)
			require.NoError(t, err)
			require.Equal(t, 200, status)

			crlf := []byte("{\r\n  \"text\": \"caf\\u00E9 \\u2665\",\r\n  \"n\": 1.0\r\n}\r\n")
			gh2 := signGitHub(secret, "push", "crlf-1", crlf)
			status, gh2Resp, err := gh2.send(c.url, hostID)
			require.NoError(t, err)
			require.Equal(t, 200, status)

			binary := []byte{0x00, 0xff, 0xfe, 0x80, '\r', '\n', 0xc3, 0x28, 0x00}
			m := hmac.New(sha256.New, []byte("internal-secret"))
			m.Write(binary)
			req, _ := http.NewRequest("POST", c.url+"/api/webhooks/"+hostID+"/internal", bytes.NewReader(binary))
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
			req.Header.Set("X-Event-Id", "bin-1")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, 202, resp.StatusCode)

			eventually(t, 30*time.Second, "three deliveries acked", func() bool {
				return len(c.deliveries(hostID, "acked")) == 3
			})
			got := rc.snapshot()
			require.Len(t, got[ghResp.DeliveryID], 1)
			require.Equal(t, form, got[ghResp.DeliveryID][0].Body)
			require.Equal(t, "application/x-www-form-urlencoded", got[ghResp.DeliveryID][0].Header.Get("Content-Type"))
			require.Equal(t, gh.headers["X-Hub-Signature-256"], got[ghResp.DeliveryID][0].Header.Get("X-Hub-Signature-256"))
			require.Len(t, got[gh2Resp.DeliveryID], 1)
			require.Equal(t, crlf, got[gh2Resp.DeliveryID][0].Body)
			var bin []received
			for k, v := range got {
				if strings.HasPrefix(k, "internal:bin-1:") {
					bin = v
				}
			}
			require.Len(t, bin, 1)
			require.Equal(t, binary, bin[0].Body)
			require.Equal(t, "application/octet-stream", bin[0].Header.Get("Content-Type"))
		})
	}
}
