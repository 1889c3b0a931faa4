package agent

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/shared"
)

// TestStatusShowsRunningAndWaiting: a handler that runs shows in Status
// with its start, its source's lane counts it, and the webhooks behind it
// wait; once done, nothing runs.
func TestStatusShowsRunningAndWaiting(t *testing.T) {
	t.Parallel()
	h := newBlocked()
	b := setup(t, func(b *testBundle) {
		b.handler.fn = func(ctx context.Context, w shared.Webhook) handler.Outcome {
			if w.DeliveryID == "github:a:1" {
				return h.run(ctx, w)
			}
			return handler.Outcome{OK: true, ResponseStatus: 200}
		}
		b.cloud.answer = serve(webhook("github:a:1", "push"), webhook("github:b:1", "push"))
	})
	started := b.clock.Now()
	<-h.started
	var st Status
	b.eventually(t, "the second webhook waits behind the first", func() bool {
		st = b.agent.Status()
		return len(st.Sources) == 1 && st.Sources[0].Waiting == 1
	})
	require.Equal(t, "h1", st.HostID)
	require.Equal(t, 2, st.Workers)
	require.Equal(t, []RunningWebhook{{DeliveryID: "github:a:1", Source: "github", EventType: "push",
		EventAction: "opened", Attempt: 1, Started: started}}, st.Running)
	require.Equal(t, []SourceLoad{{Source: "github", Running: 1, Waiting: 1}}, st.Sources)
	require.Equal(t, 2, st.InFlight)
	require.Equal(t, 1, st.Queued)
	require.Equal(t, st.Window-2, st.Credit)
	require.Equal(t, TransportHeartbeat, st.Link.InUse)
	require.Equal(t, TransportHeartbeat, st.Link.Configured)
	require.False(t, st.Link.Compress)
	require.Equal(t, started.Add(15*time.Minute), st.Link.TokenExpires)

	close(h.release)
	b.eventually(t, "both recorded", func() bool {
		st = b.agent.Status()
		return st.InFlight == 0 && len(st.Running) == 0 && len(st.Sources) == 0
	})
	require.Equal(t, 0, st.Queued)
}

// TestStatusFollowsTheTransport: on auto, the host heartbeats while the
// socket is refused, says websocket once it opens, and counts the fall back
// to heartbeats when the socket is lost.
func TestStatusFollowsTheTransport(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, fs := socketSetup(t, TransportAuto, func(b *testBundle, fs *fakeSocket) {
			inMemory(b, fs)
			fs.refuse.Store(true)
		})
		b.next(t)
		st := b.agent.Status().Link
		require.Equal(t, TransportAuto, st.Configured)
		require.Equal(t, TransportHeartbeat, st.InUse)
		require.Zero(t, st.SocketConnects)
		require.Zero(t, st.Fallbacks, "starting on heartbeats is no fall back")

		fs.refuse.Store(false)
		fs.reconnect(b)
		ce := fs.accepted()
		ce.next(shared.FrameHello)
		ce.send(shared.Frame{Type: shared.FrameWelcome, Now: b.clock.Now().Add(-2 * time.Second)})
		b.eventually(t, "the socket is in use", func() bool { return b.agent.Status().Link.InUse == TransportWebSocket })
		st = b.agent.Status().Link
		require.Equal(t, 1, st.SocketConnects)
		require.Equal(t, 0, st.Reconnects)
		require.Equal(t, b.clock.Now(), st.Since)
		b.eventually(t, "the cloud's time is known", func() bool { return b.agent.Status().Link.SkewKnown })
		require.Equal(t, 2*time.Second, b.agent.Status().Link.Skew)

		// The cloud drops the socket and refuses the next: heartbeats again.
		fs.refuse.Store(true)
		ce.conn.Close(websocket.StatusGoingAway, "bye")
		b.eventually(t, "heartbeats again", func() bool {
			b.clock.Advance(100 * time.Millisecond)
			return b.agent.Status().Link.InUse == TransportHeartbeat
		})
		st = b.agent.Status().Link
		require.Equal(t, 1, st.Fallbacks)
		require.Equal(t, 1, st.SocketConnects)
	})
}

// TestLinkTransitions: what the calls to the cloud say of the transport in
// use, for each configuration.
func TestLinkTransitions(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC)
	now := at
	l := &link{configured: TransportWebSocket, now: func() time.Time { return now }}
	require.Equal(t, LinkStatus{Configured: TransportWebSocket}, l.status())
	require.True(t, (&link{configured: TransportAuto, compress: true, now: l.now}).status().Compress, "as configured")

	now = at.Add(time.Second)
	l.socketFailed() // never connected: still nothing in use
	require.Equal(t, "", l.status().InUse)
	require.True(t, l.status().Since.IsZero())
	l.socketOpened()
	require.Equal(t, LinkStatus{Configured: TransportWebSocket, InUse: TransportWebSocket, Since: now, SocketConnects: 1}, l.status())

	now = at.Add(time.Minute)
	l.socketFailed() // lost, and the next dial failed
	require.Equal(t, "", l.status().InUse)
	require.Equal(t, now, l.status().Since)
	l.socketOpened()
	st := l.status()
	require.Equal(t, 2, st.SocketConnects)
	require.Equal(t, 1, st.Reconnects)
	require.Zero(t, st.Fallbacks, "a socket-only host never falls back")

	// On auto: heartbeats after a socket are a fall back, a failed dial
	// while on heartbeats changes nothing.
	a := &link{configured: TransportAuto, now: func() time.Time { return now }}
	a.use(TransportHeartbeat)
	a.socketFailed()
	require.Equal(t, TransportHeartbeat, a.status().InUse)
	require.Zero(t, a.status().Fallbacks)
	a.socketOpened()
	a.use(TransportHeartbeat)
	a.use(TransportHeartbeat)
	require.Equal(t, 1, a.status().Fallbacks)

	// The token's expiry, on this host's clock, from the cloud's lifetime.
	a.token(shared.TokenResponse{TokenExpiresAt: at.Add(time.Hour), Now: at.Add(45 * time.Minute)}, now)
	require.Equal(t, now.Add(15*time.Minute), a.status().TokenExpires)
}

// TestWatchCloudKeepsTheSocket: the watched cloud opens sockets when the
// cloud it wraps can, and only then.
func TestWatchCloudKeepsTheSocket(t *testing.T) {
	t.Parallel()
	l := &link{now: time.Now}
	_, ok := watchCloud(cloudapi.New("http://127.0.0.1:1", nil, "test"), l).(SocketCloud)
	require.True(t, ok)
	_, ok = watchCloud(struct{ Cloud }{}, l).(SocketCloud)
	require.False(t, ok)
	require.Nil(t, watchCloud(nil, l))
}
