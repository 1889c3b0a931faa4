package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/shared"
)

// errNoSourcesAPI: the cloud answered 404 to GET /api/hosts/sources, so it
// predates it and cannot say its sources.
var errNoSourcesAPI = errors.New("the cloud does not list a host's sources (it predates GET " + shared.PathHostSources + ")")

// cloudSources reads this host's sources as the cloud has them.
func cloudSources(ctx context.Context, client *cloudapi.Client, token string) ([]shared.HostSource, error) {
	resp, err := client.Sources(ctx, token)
	if cloudapi.StatusOf(err) == http.StatusNotFound {
		return nil, errNoSourcesAPI
	}
	if err != nil {
		return nil, err
	}
	return resp.Sources, nil
}

// sourcesRetry is how long `host run` waits to ask the cloud for its
// sources again after it could not.
const sourcesRetry = time.Minute

// sourceCheck compares the configuration's sources with the cloud's for
// `host run`: once at start and once after each reload, it logs each
// mismatch at WARN (shared.CompareSources), without holding up the agent.
// A cloud it cannot ask is asked again every sourcesRetry, and the failure
// logged once in the process's life; the host runs on regardless.
type sourceCheck struct {
	// fetch reads the cloud's sources (with the agent's token).
	fetch func(ctx context.Context) ([]shared.HostSource, error)
	clock clockwork.Clock
	log   *slog.Logger
	// reloaded carries the subscription of a configuration just reloaded;
	// only the latest waits.
	reloaded chan *shared.Subscription

	failureLogged bool
}

func newSourceCheck(fetch func(ctx context.Context) ([]shared.HostSource, error), clock clockwork.Clock, log *slog.Logger) *sourceCheck {
	return &sourceCheck{fetch: fetch, clock: clock, log: log, reloaded: make(chan *shared.Subscription, 1)}
}

// reload has the configuration reloaded with sub compared again.
func (sc *sourceCheck) reload(sub *shared.Subscription) {
	for {
		select {
		case sc.reloaded <- sub:
			return
		default:
		}
		select {
		case <-sc.reloaded: // a comparison not yet made: sub replaces it
		default:
		}
	}
}

// run compares sub at once, then each reloaded subscription, until ctx is
// done.
func (sc *sourceCheck) run(ctx context.Context, sub *shared.Subscription) {
	pending := true
	var retry <-chan time.Time
	for {
		if pending {
			pending, retry = false, nil
			switch err := sc.compare(ctx, sub); {
			case err == nil:
			case ctx.Err() != nil:
				return
			case errors.Is(err, agent.ErrRevoked):
				// The agent stops on it and says why.
				return
			case errors.Is(err, errNoSourcesAPI):
				sc.failed(err) // asking again will not change it; a reload will ask
			default:
				sc.failed(err)
				retry = sc.clock.After(sourcesRetry)
			}
		}
		select {
		case <-ctx.Done():
			return
		case sub = <-sc.reloaded:
			pending = true
		case <-retry:
			pending = true
		}
	}
}

// compare asks the cloud for its sources and logs how sub differs.
func (sc *sourceCheck) compare(ctx context.Context, sub *shared.Subscription) error {
	cloud, err := sc.fetch(ctx)
	if err != nil {
		return err
	}
	mismatches := shared.CompareSources(sub, cloud)
	for _, m := range mismatches {
		attrs := []any{"kind", m.Kind, "source", m.Source, "detail", m.Message}
		if m.Nearest != "" {
			attrs = append(attrs, "nearest", m.Nearest)
		}
		if len(m.Events) > 0 {
			attrs = append(attrs, "events", m.Events)
		}
		sc.log.Warn("source differs from the cloud's", attrs...)
	}
	if len(mismatches) == 0 {
		sc.log.Info("sources match the cloud's", "cloud_sources", len(cloud))
	}
	return nil
}

func (sc *sourceCheck) failed(err error) {
	if sc.failureLogged {
		return
	}
	sc.failureLogged = true
	sc.log.Warn("could not compare this host's sources with the cloud's; the host runs on regardless", "err", err)
}

// checkSources is `run --check`'s comparison: it prints each mismatch as a
// warning on stderr, and on stdout whether the sources match. Mismatches
// and a cloud that cannot say are warnings, never a failure of the check:
// a source may be set up on one side before the other, and `host run`
// starts all the same.
func checkSources(ctx context.Context, p *prepared, token string, stdout, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	client := cloudapi.New(p.cloudURL, cloudClient(), "relay-host/"+agent.Version)
	cloud, err := cloudSources(ctx, client, token)
	if err != nil {
		fmt.Fprintf(stderr, "host run --check: warning: the sources were not compared with the cloud's: %v\n", err)
		fmt.Fprintln(stdout, "sources not compared with the cloud's (see the warning)")
		return
	}
	mismatches := shared.CompareSources(p.cfg.Subscription(), cloud)
	for _, m := range mismatches {
		fmt.Fprintf(stderr, "host run --check: warning: %s\n", m.Message)
	}
	switch len(mismatches) {
	case 0:
		fmt.Fprintf(stdout, "sources match the cloud's (%d)\n", len(cloud))
	case 1:
		fmt.Fprintln(stdout, "sources: 1 differs from the cloud's (the warning on stderr)")
	default:
		fmt.Fprintf(stdout, "sources: %d differ from the cloud's (the warnings on stderr)\n", len(mismatches))
	}
}
