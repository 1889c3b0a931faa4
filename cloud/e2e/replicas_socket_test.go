package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/shared"
)

// TestReplicasOneSocketPerHost: a host's socket on replica A, then a second
// socket of the same host on replica B (a host that reconnected through a
// balancer while its old socket lingers half-open). A closes its socket
// with 4000 within a bound and releases what it pushed; B welcomes the new
// socket only then, pushes those webhooks again (each attempt 2: released
// once, pushed once more) and the ones sent afterwards to either replica.
// The old socket gets nothing more; every webhook is acked once.
func TestReplicasOneSocketPerHost(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	env := []string{
		"RELAY_JWT_KEY=" + "replicas-share-this-jwt-key-of-32+-bytes",
		"RELAY_SECRET_KEYS=" + base64.StdEncoding.EncodeToString([]byte("replicas share this 32-byte key!")),
		"RELAY_LEASE=5m", // a lease never ends within the test: only a release frees a delivery
	}
	a, b := startCloud(t, dbURL, env...), startCloud(t, dbURL, env...)
	hostID, code := a.newHost("one-socket", secret)
	var claim shared.ClaimResponse
	require.Equal(t, 200, post(t, b.url+shared.PathClaim, "", shared.ClaimRequest{ClaimCode: code}, &claim))

	old := dialHostSocket(t, a.url, claim.Token, 10)
	body := githubPayloads(t)[0]
	send := func(c *cloud, ids ...string) {
		for _, id := range ids {
			status, resp, err := signGitHub(secret, body.event, id, body.body).send(c.url, hostID)
			require.NoError(t, err)
			require.Equal(t, 200, status, "%+v", resp)
		}
	}
	send(b, "before-1", "before-2", "before-3") // stored on B, pushed by A (NOTIFY)
	first := old.pushed(t, 3)

	// The host connects again, on B, holding nothing.
	started := time.Now()
	newer := dialHostSocket(t, b.url, claim.Token, 10)
	welcomed := time.Since(started)
	code4000, closed := old.closed(t)
	require.Equal(t, websocket.StatusCode(shared.CloseReplaced), code4000, "the older socket, on the other replica")
	require.Less(t, closed.Sub(started), 10*time.Second, "closed within the takeover bound")
	require.Less(t, welcomed, 10*time.Second)

	again := newer.pushed(t, 3)
	require.ElementsMatch(t, first, again, "what the old socket carried is due again at once")
	// Pushed again: delivered, or still delivering until reported or
	// marked (delivery.MarkAfter).
	pushedAgain := append(a.deliveries(hostID, "delivering"), a.deliveries(hostID, "delivered")...)
	require.Len(t, pushedAgain, 3)
	for _, d := range pushedAgain {
		require.Equal(t, 2, d.Attempts, "%s: released once, pushed once more", d.DeliveryID)
	}
	send(a, "after-1", "after-2")
	send(b, "after-3")
	later := newer.pushed(t, 3)
	all := append(again, later...)
	newer.ack(t, all)

	acked := b.deliveries(hostID, "acked")
	require.Len(t, acked, 6)
	for _, d := range acked {
		want := 1
		if strings.Contains(d.DeliveryID, "before-") {
			want = 2
		}
		require.Equal(t, want, d.Attempts, d.DeliveryID)
	}
	require.Empty(t, b.deliveries(hostID, "delivering"))
	require.Empty(t, b.deliveries(hostID, "delivered"))
	require.Empty(t, b.deliveries(hostID, "retrying"))
	t.Logf("older socket closed %s after the newer one dialed; the newer welcomed after %s",
		closed.Sub(started).Round(time.Millisecond), welcomed.Round(time.Millisecond))
}

// e2eSocket is a host's socket at the protocol edge.
type e2eSocket struct {
	conn *websocket.Conn
}

func dialHostSocket(t *testing.T, cloudURL, token string, credit int) *e2eSocket {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(cloudURL, "http") + shared.PathSocket
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	require.NoError(t, err)
	conn.SetReadLimit(64 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	s := &e2eSocket{conn: conn}
	s.send(t, shared.Frame{Type: shared.FrameHello, AgentVersion: "e2e", Credit: credit})
	f, err := s.read()
	require.NoError(t, err)
	require.Equal(t, shared.FrameWelcome, f.Type)
	return s
}

func (s *e2eSocket) send(t *testing.T, f shared.Frame) {
	t.Helper()
	data, err := json.Marshal(f)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.conn.Write(ctx, websocket.MessageText, data))
}

func (s *e2eSocket) read() (*shared.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, data, err := s.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	var f shared.Frame
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// pushed reads until n webhooks came, and returns their ids.
func (s *e2eSocket) pushed(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for len(ids) < n {
		f, err := s.read()
		require.NoError(t, err)
		require.Equal(t, shared.FrameWebhooks, f.Type)
		for _, w := range f.Webhooks {
			ids = append(ids, w.DeliveryID)
		}
	}
	require.Len(t, ids, n)
	return ids
}

// closed reads until the cloud closes the socket, and returns the code and
// when; a webhook pushed meanwhile fails the test.
func (s *e2eSocket) closed(t *testing.T) (websocket.StatusCode, time.Time) {
	t.Helper()
	for {
		f, err := s.read()
		if err != nil {
			return websocket.CloseStatus(err), time.Now()
		}
		require.NotEqual(t, shared.FrameWebhooks, f.Type, "pushed on a replaced socket: %+v", f)
	}
}

// ack reports ids acked and waits for the confirm.
func (s *e2eSocket) ack(t *testing.T, ids []string) {
	t.Helper()
	s.send(t, shared.Frame{Type: shared.FrameReport, ID: 1, Acks: ids})
	f, err := s.read()
	require.NoError(t, err)
	require.Equal(t, shared.FrameConfirm, f.Type, fmt.Sprintf("%+v", f))
	require.Equal(t, int64(1), f.ID)
}
