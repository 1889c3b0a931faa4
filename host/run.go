package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
	"github.com/relaykit/relay/shared/telemetry"
)

// ledgerFile is the ledger's name in the state directory.
const ledgerFile = "ledger.db"

// prepared is everything `host run` checks before it starts.
type prepared struct {
	cfg      *config.Config
	sources  map[string]agent.Source
	stateDir string
	creds    config.Credentials
	cloudURL string
	warnings []string // checkCloud's, said before the cloud is asked
}

// prepare loads and validates the configuration, the state directory and
// the credentials, and checks the cloud the host would talk to (checkCloud:
// the config's cloud_url, else the claimed one). Its errors are the user's
// to fix (exit 2); its warnings (prepared.warnings) are to be said before
// anything is sent.
func prepare(configPath, stateFlag string, consent cloudConsent, getenv func(string) string) (*prepared, error) {
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, err
	}
	sources, err := buildSources(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := config.StateDir(stateFlag, getenv)
	if err != nil {
		return nil, err
	}
	creds, err := config.ReadCredentials(dir)
	if err != nil {
		return nil, err
	}
	cloudURL, from := cfg.CloudURL, "config cloud_url"
	if cloudURL == "" {
		cloudURL, from = creds.CloudURL, config.CredentialsFile+"'s cloud_url"
	}
	if cloudURL == "" {
		return nil, fmt.Errorf("no cloud URL: neither the config's cloud_url nor %s's names one; claim the host again", config.CredentialsFile)
	}
	warnings, err := checkCloud(from, cloudURL, creds.CloudURL, consent)
	if err != nil {
		return nil, err
	}
	return &prepared{cfg: cfg, sources: sources, stateDir: dir, creds: creds, cloudURL: cloudURL, warnings: warnings}, nil
}

// checkTimeout bounds `run --check`'s exchange with the cloud.
const checkTimeout = 15 * time.Second

// checkCredential exchanges the host's credential for a token, as `host run`
// does before its first heartbeat, and returns the token, or the exit code
// `host run` would end with and why; exitOK and nil when the cloud accepts
// it.
func checkCredential(ctx context.Context, p *prepared) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	client := cloudapi.New(p.cloudURL, cloudClient(), "relay-host/"+agent.Version)
	resp, err := client.Token(ctx, shared.TokenRequest{HostID: p.creds.HostID, HostCredential: p.creds.HostCredential})
	code, err := credentialError(p, err)
	return resp.Token, code, err
}

// credentialError is the exit code and message of a failed token exchange.
func credentialError(p *prepared, err error) (int, error) {
	var ce *cloudapi.Error
	var ue *url.Error
	switch {
	case err == nil:
		return exitOK, nil
	case errors.As(err, &ce) && ce.Status == http.StatusUnauthorized:
		return exitRevoked, fmt.Errorf("the cloud at %s does not accept host %s's credential (%d: %s): "+
			"the host was deleted or claimed again, or %s is not the one `host claim` wrote; claim the host again",
			p.cloudURL, p.creds.HostID, ce.Status, ce.Message, filepath.Join(p.stateDir, config.CredentialsFile))
	case errors.As(err, &ce) && ce.Status == http.StatusGone:
		return exitRevoked, fmt.Errorf("the cloud at %s refuses host %s's credential (%d: %s); claim the host again",
			p.cloudURL, p.creds.HostID, ce.Status, ce.Message)
	case errors.As(err, &ce):
		return exitFailure, fmt.Errorf("the cloud at %s could not check the credential: %v", p.cloudURL, err)
	case errors.As(err, &ue):
		return exitFailure, fmt.Errorf("the cloud at %s cannot be reached: %v", p.cloudURL, err)
	default:
		return exitFailure, fmt.Errorf("the answer of %s is not a relay cloud's: %v", p.cloudURL, err)
	}
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "configuration file (JSON)")
	check := fs.Bool("check", false, "validate the configuration, and the credentials with the cloud, then exit")
	offline := fs.Bool("offline", false, "with --check: validate the files alone, without contacting the cloud")
	stateFlag := fs.String("state", "", "state directory")
	listenFlag := fs.String("listen", "", "local API address")
	listenPublic := fs.Bool("listen-public", false, "accept a local API address that is not loopback (it has no authentication)")
	consent := consentFlags(fs, true)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return flagExit(fs, err, stdout)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "host run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *configPath == "" {
		fmt.Fprint(stderr, "host run: --config is required\n")
		return exitUsage
	}
	if *offline && !*check {
		fmt.Fprint(stderr, "host run: --offline goes with --check\n")
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "host run: --log-level: %v\n", err)
		return exitUsage
	}
	faultHook, err := testFaultHook(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	clock, err := testClock(getenv, clockwork.NewRealClock())
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}

	p, err := prepare(*configPath, *stateFlag, *consent, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	addr := config.ListenAddr(*listenFlag, getenv)
	listenWarning, err := checkListen(addr, *listenPublic)
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	if *check {
		for _, w := range append(p.warnings, listenWarning) {
			if w != "" {
				fmt.Fprintf(stderr, "host run --check: warning: %s\n", w)
			}
		}
		credential := "credential not checked with the cloud (--offline)"
		var token string
		if !*offline {
			var code int
			if token, code, err = checkCredential(ctx, p); err != nil {
				fmt.Fprintf(stderr, "host run --check: %s is valid, but %v\n", *configPath, err)
				return code
			}
			credential = "credential accepted by the cloud"
		}
		fmt.Fprintf(stdout, "configuration OK: %s\n", *configPath)
		fmt.Fprintf(stdout, "host %s, cloud %s, state %s\n", p.creds.HostID, p.cloudURL, p.stateDir)
		fmt.Fprintln(stdout, credential)
		describeSources(stdout, p.cfg)
		if *offline {
			fmt.Fprintln(stdout, "sources not compared with the cloud's (--offline): a source name the cloud does not have goes unnoticed")
			return exitOK
		}
		checkSources(ctx, p, token, stdout, stderr)
		return exitOK
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if faultHook != nil {
		log.Warn("test fault hook armed: this process kills itself at a chosen point (RELAY_HOST_TEST_CRASH); never use this outside tests",
			"point", getenv(envTestCrash))
	}
	if v := getenv(envTestClock); v != "" {
		log.Warn("test clock armed: this host's clock is skewed on purpose (RELAY_HOST_TEST_CLOCK_OFFSET); never use this outside tests",
			"offset", v, "host_now", clock.Now().UTC().Format(time.RFC3339))
	}
	for _, w := range p.warnings {
		log.Warn(w, "cloud_url", p.cloudURL)
	}
	if listenWarning != "" {
		log.Warn(listenWarning, "addr", addr)
	}

	l, err := ledger.Open(ctx, filepath.Join(p.stateDir, ledgerFile))
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitFailure
	}
	defer l.Close()
	// Handler spans go to OTEL_EXPORTER_OTLP_ENDPOINT when it is set.
	tracer, shutdownTracing, err := telemetry.Setup(ctx, "relay-host", getenv)
	var bad *telemetry.SettingError
	if errors.As(err, &bad) {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "host run: %v\n", err)
		return exitFailure
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("trace export at exit", "err", err)
		}
	}()

	var api *localapi.Server // set below; its metrics observe handler runs
	cloud := cloudapi.New(p.cloudURL, cloudClient(), "relay-host/"+agent.Version, cloudapi.Compress(p.cfg.Compress))
	a := agent.New(agent.Options{
		Cloud:        cloud,
		HostID:       p.creds.HostID,
		Credential:   p.creds.HostCredential,
		Ledger:       l,
		Sources:      p.sources,
		Subscription: p.cfg.Subscription(),
		Interval:     p.cfg.HeartbeatInterval,
		Workers:      p.cfg.Workers,
		Grace:        p.cfg.ShutdownGrace,
		MaxBackoff:   p.cfg.MaxBackoff,
		Transport:    p.cfg.Transport,
		Compress:     p.cfg.Compress,
		Clock:        clock,
		Logger:       log,
		FaultHook:    faultHook,
		Observe:      func(source, result string, took time.Duration) { api.ObserveHandler(source, result, took) },
		Tracer:       tracer,
	})

	// The local API is up before the first heartbeat.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "host run: local API: %v\n", err)
		return exitFailure
	}
	api = localapi.New(l, a, p.cfg.HeartbeatInterval, clock, log)
	api.AllowListenHost(addr)
	api.SetCloudURL(p.cloudURL)
	srv := localAPIServer(api)
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
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("local API listening", "addr", ln.Addr().String(), "state_dir", p.stateDir, "cloud_url", p.cloudURL)

	var background sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	retention := &ledger.Retention{Ledger: l, MaxAge: p.cfg.LedgerRetention, Clock: clock, CloudNow: a.CloudNow, Logger: log}
	background.Go(func() { retention.Run(bgCtx) })
	// The sources are compared with the cloud's beside the agent, with its
	// token: a slow cloud delays no heartbeat.
	sources := newSourceCheck(func(ctx context.Context) ([]shared.HostSource, error) {
		token, err := a.Token(ctx)
		if err != nil {
			return nil, err
		}
		return cloudSources(ctx, cloud, token)
	}, clock, log)
	background.Go(func() { sources.run(bgCtx, p.cfg.Subscription()) })
	background.Go(func() { reloadOnHangup(bgCtx, hup, *configPath, p.cfg, a, sources, log) })

	runErr := a.Run(ctx)
	stopBackground()
	background.Wait()

	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shutdownCtx)

	select {
	case err := <-serveErr:
		fmt.Fprintf(stderr, "host run: local API: %v\n", err)
		return exitFailure
	default:
	}
	if errors.Is(runErr, agent.ErrRevoked) {
		fmt.Fprintf(stderr, "host run: %v\n", runErr)
		return exitRevoked
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "host run: %v\n", runErr)
		return exitFailure
	}
	return exitOK
}

// checkListen refuses a local API address beyond this machine unless
// public (--listen-public) says so: the local API has no authentication,
// and its check of the Host header (against DNS rebinding) stops a browser's
// page, not a client on the network that sends "Host: localhost". It
// returns the warning to log when public accepts such an address.
func checkListen(addr string, public bool) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("local API address %q (--listen, else $%s): %v", addr, config.EnvListen, err)
	}
	if loopbackHost(host) {
		return "", nil
	}
	if !public {
		return "", fmt.Errorf("local API address %s (--listen, else $%s) is not loopback: the local API has no authentication, "+
			"and anyone who can reach it would read the ledger (summaries, handlers' output), /healthz and /metrics; "+
			"listen on 127.0.0.1, or give --listen-public to accept that", addr, config.EnvListen)
	}
	return fmt.Sprintf("--listen-public: the local API answers, without authentication, anyone who can reach %s", addr), nil
}

// localAPIServer serves the local API with every timeout set, so no client
// holds a connection (or a goroutine) longer than a request takes: the
// largest answer, a page of 500 ledger rows, is written in milliseconds.
func localAPIServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// reloadOnHangup re-reads the configuration on SIGHUP and hands the new
// sources and subscription to the agent, and to sources to compare with
// the cloud's. A configuration that does not validate is refused and the
// running one kept.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, path string, running *config.Config, a *agent.Agent,
	sources *sourceCheck, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		cfg, err := config.Load(path)
		if err == nil {
			var built map[string]agent.Source
			if built, err = buildSources(cfg); err == nil {
				if cfg.CloudURL != running.CloudURL || cfg.Workers != running.Workers ||
					cfg.HeartbeatInterval != running.HeartbeatInterval || cfg.MaxBackoff != running.MaxBackoff ||
					cfg.ShutdownGrace != running.ShutdownGrace || cfg.LedgerRetention != running.LedgerRetention ||
					cfg.Transport != running.Transport || cfg.Compress != running.Compress {
					log.Warn("reload: only webhooks are reloaded; the other settings take effect at the next start")
				}
				a.Reload(built, cfg.Subscription())
				sources.reload(cfg.Subscription())
				continue
			}
		}
		log.Error("reload refused; the running configuration stays", "err", err)
	}
}

// buildSources makes the agent's sources, with one handler per route.
func buildSources(cfg *config.Config) (map[string]agent.Source, error) {
	sources := make(map[string]agent.Source, len(cfg.Webhooks))
	for name, s := range cfg.Webhooks {
		src := agent.Source{Enabled: s.Enabled, Events: s.Events, Parallel: s.Parallel, Parser: s.Provider}
		for i, r := range s.Routes {
			h, err := buildHandler(r.Handler, cfg.Workers)
			if err != nil {
				return nil, fmt.Errorf("webhooks.%s route %d: %w", name, i+1, err)
			}
			src.Routes = append(src.Routes, agent.Route{Events: r.Events, Handler: h})
		}
		sources[name] = src
	}
	return sources, nil
}

// buildHandler makes one route's handler; a forward keeps a connection
// alive for each worker.
func buildHandler(h config.Handler, workers int) (agent.Handler, error) {
	if h.Kind() == "forward" {
		return handler.NewForward(handler.ForwardOptions{
			URL: h.Forward, ConnectTimeout: h.ConnectTimeout, Timeout: h.Timeout, Retry4xx: h.Retry4xx,
			MaxConns: workers,
		})
	}
	return handler.NewExec(handler.ExecOptions{Argv: h.Exec, Timeout: h.Timeout, RetryNonzeroExit: h.RetryNonzeroExit})
}

// describeSources prints what each source does, for `run --check`.
func describeSources(w io.Writer, cfg *config.Config) {
	names := make([]string, 0, len(cfg.Webhooks))
	for name := range cfg.Webhooks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := cfg.Webhooks[name]
		state := "enabled"
		if !s.Enabled {
			state = "disabled"
		}
		order := "in order"
		if s.Parallel {
			order = "parallel"
		}
		events := "every event"
		if len(s.Events) > 0 {
			events = strings.Join(s.Events, ", ")
		}
		fmt.Fprintf(w, "  %s: %s, %s, %s\n", name, state, order, events)
		for _, r := range s.Routes {
			match := "*"
			if len(r.Events) > 0 {
				match = strings.Join(r.Events, ", ")
			}
			target := r.Handler.Forward
			if r.Handler.Kind() == "exec" {
				target = strings.Join(r.Handler.Exec, " ")
			}
			fmt.Fprintf(w, "    %s → %s %s (timeout %s)\n", match, r.Handler.Kind(), target, r.Handler.Timeout)
		}
	}
}
