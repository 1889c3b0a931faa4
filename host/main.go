// Command host is the relay's agent for one machine: `host claim` registers
// the machine with the cloud, `host run` heartbeats the cloud, runs each
// leased webhook's handler once per its local ledger and serves the local API.
//
// Exit codes: 0 ok or a clean stop on SIGTERM/SIGINT, 1 runtime failure,
// 2 usage or configuration error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/host/localapi"
	"github.com/relaykit/relay/shared"
)

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

const usage = `usage:
  host claim --cloud URL --code CODE [--state DIR]
  host run --config FILE [--state DIR] [--listen ADDR] [--log-level LEVEL]

The state directory is --state, else $RELAY_HOST_STATE, else ~/.relay-host.
The local API listens on --listen, else $RELAY_HOST_LISTEN, else 127.0.0.1:7071.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the whole command, with its surroundings passed in for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "claim":
		return runClaim(ctx, args[1:], stdout, stderr, getenv)
	case "run":
		return runAgent(ctx, args[1:], stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "host: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("host "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	return fs
}

func cloudClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("claim", stderr)
	cloudURL := fs.String("cloud", "", "URL of the relay cloud")
	code := fs.String("code", "", "one-time claim code")
	stateFlag := fs.String("state", "", "state directory")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "host claim: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *cloudURL == "" || *code == "" {
		fmt.Fprint(stderr, "host claim: --cloud and --code are required\n")
		return exitUsage
	}
	if err := config.CheckURL(*cloudURL); err != nil {
		fmt.Fprintf(stderr, "host claim: --cloud: %v\n", err)
		return exitUsage
	}
	dir, err := config.StateDir(*stateFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitUsage
	}
	base := strings.TrimRight(*cloudURL, "/")

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := cloudapi.New(base, cloudClient(), "relay-host/"+agent.Version)
	resp, err := client.Claim(ctx, shared.ClaimRequest{ClaimCode: *code, AgentVersion: agent.Version})
	if err != nil {
		var ce *cloudapi.Error
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "host claim: the cloud refused the claim (%d): %s\n", ce.Status, ce.Message)
		} else {
			fmt.Fprintf(stderr, "host claim: %v\n", err)
		}
		return exitFailure
	}
	if resp.HostID == "" || resp.HostCredential == "" {
		fmt.Fprint(stderr, "host claim: the cloud's answer carries no host id or credential\n")
		return exitFailure
	}
	creds := config.Credentials{CloudURL: base, HostID: resp.HostID, HostCredential: resp.HostCredential}
	if err := config.WriteCredentials(dir, creds); err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "host claimed; credentials stored in %s\n", filepath.Join(dir, config.CredentialsFile))
	fmt.Fprintln(stdout, resp.HostID)
	return exitOK
}

func runAgent(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "configuration file (JSON)")
	stateFlag := fs.String("state", "", "state directory")
	listenFlag := fs.String("listen", "", "local API address")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "host run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *configPath == "" {
		fmt.Fprint(stderr, "host run: --config is required\n")
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "host run: --log-level: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	dir, err := config.StateDir(*stateFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	creds, err := config.ReadCredentials(dir)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	cloudURL := cfg.CloudURL
	if cloudURL == "" {
		cloudURL = creds.CloudURL
	}
	if err := config.CheckURL(cloudURL); err != nil {
		fmt.Fprintf(stderr, "host run: cloud URL (config cloud_url, else credentials.json): %v\n", err)
		return exitUsage
	}
	routes, err := buildRoutes(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}

	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitFailure
	}
	defer l.Close()

	clock := clockwork.NewRealClock()
	a := agent.New(agent.Options{
		Cloud:        cloudapi.New(cloudURL, cloudClient(), "relay-host/"+agent.Version),
		HostID:       creds.HostID,
		Credential:   creds.HostCredential,
		Ledger:       l,
		Routes:       routes,
		Subscription: cfg.Subscription(),
		Interval:     cfg.HeartbeatInterval,
		Workers:      cfg.Workers,
		Clock:        clock,
		Logger:       log,
	})

	// The local API is up before the first heartbeat.
	addr := config.ListenAddr(*listenFlag, getenv)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "host run: local API: %v\n", err)
		return exitFailure
	}
	srv := &http.Server{
		Handler:           localapi.New(l, a, clock, log),
		ReadHeaderTimeout: 5 * time.Second,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
			cancel()
		}
	}()
	log.Info("local API listening", "addr", ln.Addr().String(), "state_dir", dir, "cloud_url", cloudURL)

	runErr := a.Run(ctx)

	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shutdownCtx)

	select {
	case err := <-serveErr:
		fmt.Fprintf(stderr, "host run: local API: %v\n", err)
		return exitFailure
	default:
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "host run: %v\n", runErr)
		return exitFailure
	}
	return exitOK
}

// buildRoutes makes one handler per configured source.
func buildRoutes(cfg *config.Config) (map[string]agent.Route, error) {
	routes := make(map[string]agent.Route, len(cfg.Webhooks))
	for name, s := range cfg.Webhooks {
		r := agent.Route{Enabled: s.Enabled, Events: s.Events}
		switch s.HandlerKind() {
		case "forward":
			h, err := handler.NewForward(handler.ForwardOptions{
				URL: s.Forward, ConnectTimeout: s.ConnectTimeout, Timeout: s.Timeout, Retry4xx: s.Retry4xx,
			})
			if err != nil {
				return nil, fmt.Errorf("webhooks.%s: %w", name, err)
			}
			r.Handler = h
		case "exec":
			h, err := handler.NewExec(handler.ExecOptions{
				Argv: s.Exec, Timeout: s.Timeout, RetryNonzeroExit: s.RetryNonzeroExit,
			})
			if err != nil {
				return nil, fmt.Errorf("webhooks.%s: %w", name, err)
			}
			r.Handler = h
		}
		routes[name] = r
	}
	return routes, nil
}
