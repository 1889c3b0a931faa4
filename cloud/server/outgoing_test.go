package server

import (
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// outgoingRecorder is a Config.OutgoingChanged that keeps what it is told.
type outgoingRecorder struct {
	mu          sync.Mutex
	held, total int64 // held now; all the bytes ever told held
}

func (r *outgoingRecorder) changed(delta int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held += delta
	if delta > 0 {
		r.total += delta
	}
}

func (r *outgoingRecorder) get() (held, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held, r.total
}

// The body bytes of leased deliveries, while the server encodes and writes
// them to their host, are told to Config.OutgoingChanged, and given back
// once written: over a heartbeat's answer and over a socket.
func TestOutgoingBodiesTold(t *testing.T) {
	for _, transport := range []string{"heartbeat", "heartbeat-binary", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			var rec outgoingRecorder
			b, _ := socketSetupWith(t, nil, Config{OutgoingChanged: rec.changed})
			hostID, token := b.newHost("h")
			ids := b.send3(hostID)
			held, total := rec.get()
			require.Zero(t, held, "nothing leased yet")
			require.Zero(t, total)

			switch transport {
			case "heartbeat":
				require.ElementsMatch(t, ids, b.leaseAll(token, shared.HeartbeatRequest{AgentVersion: "test"}))
			case "heartbeat-binary":
				a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{AgentVersion: "test"}),
					map[string]string{"Authorization": "Bearer " + token, "Accept": binaryAccept})
				require.Equal(t, shared.MediaTypeWebhooksBinary, a.header.Get("Content-Type"))
				var hb shared.HeartbeatResponse
				require.NoError(t, shared.DecodeHeartbeatAnswer(a.body, &hb, nil))
				var got []string
				for _, w := range hb.Webhooks {
					got = append(got, w.DeliveryID)
				}
				require.ElementsMatch(t, ids, got)
			default:
				hs := b.connect(token, 3)
				require.ElementsMatch(t, ids, hs.pushed(3))
				require.NoError(t, hs.conn.Close(websocket.StatusNormalClosure, ""))
			}
			require.Eventually(t, func() bool {
				held, total := rec.get()
				return held == 0 && total == 3*int64(len(prBody))
			}, 5*time.Second, time.Millisecond, "each body told once while held, and given back")
		})
	}
}
