package main

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// openApp opens the app of serve's settings in a temporary directory,
// listening on a free port of this machine.
func openApp(t *testing.T, ctx context.Context) *app {
	t.Helper()
	hermetic(t)
	var o options
	_, err := o.parseFlags(o.flagSet("serve"), nil)
	require.NoError(t, err)
	a := newApp(ctx, o, slog.New(slog.DiscardHandler))
	if err := a.Open(ctx); err != nil {
		_ = a.Close()
		t.Fatal(err)
	}
	return a
}

func ready(t *testing.T, a *app) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + a.ln.Addr().String() + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestAppOpenRunClose: an opened app serves; once its context is done, Run
// closes it and returns nil, and nothing it started is left running.
func TestAppOpenRunClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	a := openApp(t, ctx)
	ready(t, a)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(shutdownTimeout):
		t.Fatal("Run did not return")
	}
	_, err := http.Get("http://" + a.ln.Addr().String() + "/readyz")
	require.Error(t, err, "the listener is closed")
}

// TestAppServerFails: an HTTP server that stops with an error ends Run,
// which closes the app and says why, without waiting for a signal.
func TestAppServerFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	a := openApp(t, ctx)
	ready(t, a)
	require.NoError(t, a.ln.Close()) // the server's Accept fails
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "serve: ")
	case <-time.After(shutdownTimeout):
		t.Fatal("Run did not return")
	}
}

// TestAppOpenFails: an app whose Open fails is closed as far as it got:
// nothing it started is left running.
func TestAppOpenFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	busy := openApp(t, ctx)
	defer busy.Close()

	hermetic(t)
	var o options
	_, err := o.parseFlags(o.flagSet("serve"), []string{"-listen=" + busy.ln.Addr().String()})
	require.NoError(t, err)
	a := newApp(ctx, o, slog.New(slog.DiscardHandler))
	err = a.Open(ctx)
	require.ErrorContains(t, err, "listen: ")
	require.NoError(t, a.Close())
}
