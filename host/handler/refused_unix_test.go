//go:build unix

package handler

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForwardConnectionRefused(t *testing.T) {
	t.Parallel()
	addr := refusingAddr(t)
	out := newForward(t, "http://user:pw@"+addr+"/x", nil).Handle(context.Background(), Job{Webhook: testWebhook("{}")})
	require.False(t, out.OK)
	require.True(t, out.Retryable)
	require.Contains(t, out.Error, "connection error")
	require.Contains(t, out.Error, "refused")
	require.NotContains(t, out.Error, "pw", "credentials in the URL are never reported")
}

// refusingAddr is a loopback address that refuses connections for the
// whole test: a socket bound to its port that never listens. (A listener's
// port closed again may be taken by another test's server meanwhile.)
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
