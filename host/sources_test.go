package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/shared"
)

// fakeSources answers sourceCheck's fetches one by one, as the test says.
type fakeSources struct {
	asked   chan struct{}
	answers chan fetchAnswer
}

type fetchAnswer struct {
	sources []shared.HostSource
	err     error
}

func (f *fakeSources) fetch(ctx context.Context) ([]shared.HostSource, error) {
	f.asked <- struct{}{}
	a := <-f.answers
	return a.sources, a.err
}

// TestSourceCheck: `host run` compares its sources with the cloud's at
// start and after each reload, logging each mismatch at WARN once; a cloud
// it cannot ask is asked again a minute later (on the host's clock), the
// failure logged once in all; a refused credential or a cloud that
// predates the call is not asked again until a reload.
func TestSourceCheck(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	f := &fakeSources{asked: make(chan struct{}), answers: make(chan fetchAnswer)}
	sc := newSourceCheck(f.fetch, clock, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	typo := &shared.Subscription{Webhooks: map[string]shared.SourceSubscription{"githb": {Enabled: true}}}
	go func() {
		defer close(done)
		sc.run(ctx, typo)
	}()
	github := []shared.HostSource{{Name: "github", Provider: "github", Enabled: true}}
	answer := func(a fetchAnswer) {
		t.Helper()
		select {
		case <-f.asked:
		case <-time.After(10 * time.Second):
			t.Fatalf("the cloud was not asked; logs:\n%s", logs.String())
		}
		f.answers <- a
	}
	notAsked := func() {
		t.Helper()
		select {
		case <-f.asked:
			t.Fatal("asked again")
		default:
		}
	}
	count := func(s string) int { return strings.Count(logs.String(), s) }

	// At start the cloud cannot be reached: logged once, asked again a
	// minute later, and again; not logged again.
	answer(fetchAnswer{err: errors.New("connection refused")})
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(sourcesRetry - time.Second)
	notAsked()
	clock.Advance(time.Second)
	answer(fetchAnswer{err: errors.New("connection refused")})
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(sourcesRetry)
	answer(fetchAnswer{sources: github})
	require.Eventually(t, func() bool { return count("source differs") == 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, count("could not compare this host's sources with the cloud's"))
	require.Contains(t, logs.String(), `level=WARN msg="source differs from the cloud's" kind=not-in-cloud source=githb detail=`)
	require.Contains(t, logs.String(), `level=WARN msg="source differs from the cloud's" kind=not-in-cloud source=githb detail=`+
		`"webhooks.githb: the cloud has no source \"githb\" for this host, so this handler never runs; did you mean \"github\"?`)
	require.Contains(t, logs.String(), `nearest=github`)
	require.Contains(t, logs.String(), `kind=not-on-host source=github`)

	// Compared: nothing more until a reload, whatever the time.
	clock.Advance(time.Hour)
	notAsked()

	// A reload is compared once; a reload that matches says so.
	sc.reload(&shared.Subscription{Webhooks: map[string]shared.SourceSubscription{"github": {Enabled: true}}})
	answer(fetchAnswer{sources: github})
	require.Eventually(t, func() bool { return count("sources match the cloud's") == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 2, count("source differs"))

	// A cloud that predates the call is not asked again until a reload;
	// nor after a refused credential, which the agent reports.
	sc.reload(typo)
	answer(fetchAnswer{err: errNoSourcesAPI})
	clock.Advance(time.Hour)
	notAsked()
	sc.reload(typo)
	answer(fetchAnswer{err: fmt.Errorf("%w: 410", agent.ErrRevoked)})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the check did not stop on a refused credential")
	}
	cancel()
	require.Equal(t, 1, count("could not compare"), "logged once in all")
	require.NotContains(t, logs.String(), "410")
}
