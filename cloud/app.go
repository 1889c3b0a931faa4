package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/console"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/slewclock"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/sweep"
	"github.com/relaykit/relay/cloud/tlsconf"
	"github.com/relaykit/relay/shared/buildinfo"
	"github.com/relaykit/relay/shared/telemetry"
)

// serve is `cloud serve`: it opens the application, runs it until ctx is
// done (SIGINT, SIGTERM) or a server fails, and closes it.
func serve(ctx context.Context, args []string) error {
	o, log, err := parse("serve", args)
	if err != nil {
		return err
	}
	a := newApp(ctx, o, log)
	if err := a.Open(ctx); err != nil {
		_ = a.Close() // what Open got before it failed
		return err
	}
	return a.Run(ctx)
}

// shutdownTimeout bounds how long the HTTP servers drain on shutdown.
const shutdownTimeout = 15 * time.Second

// app is a running `cloud serve`: its settings, the store, the server and
// its listeners, and one group of goroutines that runs the HTTP servers
// and every background loop. Open builds and starts it, Run waits until it
// is told to stop or a server fails, and Close stops it in order: the HTTP
// servers stop accepting and drain, then the loops stop, then the store
// closes and the last traces are exported.
type app struct {
	o   options
	log *slog.Logger

	shutdownTracing func(context.Context) error
	hup             chan os.Signal // SIGHUP: read the key ring and the TLS certificate again
	st              store.Store
	srv             *server.Server
	tls             *tlsconf.Setup // nil: plain HTTP
	http            *http.Server   // nil until it serves
	ln              net.Listener
	redirect        *http.Server // the plain-HTTP listener's (redirects, ACME challenges), or nil
	redirectLn      net.Listener

	// group runs the HTTP servers and the loops, on groupCtx: an HTTP
	// server failing cancels it, and with it Run's wait. stopLoops
	// cancels it once HTTP has drained.
	group     *errgroup.Group
	groupCtx  context.Context
	stopLoops context.CancelFunc
}

// newApp returns the app of checked settings, opened by Open. Its loops
// run until Close, whatever becomes of ctx.
func newApp(ctx context.Context, o options, log *slog.Logger) *app {
	a := &app{o: o, log: log}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	a.group, a.groupCtx = errgroup.WithContext(loopCtx)
	a.stopLoops = stop
	return a
}

// Open builds the app and starts it: migrates the database, builds the
// server, the alert evaluator and the console, listens, and starts the
// loops and the HTTP servers. Call Close when it fails too: it releases
// what Open got.
func (a *app) Open(ctx context.Context) error {
	o, log := &a.o, a.log
	// Intake, store and lease spans go to OTEL_EXPORTER_OTLP_ENDPOINT when
	// it is set.
	tracer, shutdownTracing, err := telemetry.Setup(ctx, "relay-cloud", os.Getenv)
	var bad *telemetry.SettingError
	if errors.As(err, &bad) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	a.shutdownTracing = shutdownTracing
	// SIGHUP reloads the secret key ring (see reloadKeys); one that comes
	// while the server starts is handled once it runs, rather than killing it.
	a.hup = make(chan os.Signal, 1)
	signal.Notify(a.hup, syscall.SIGHUP)
	ring, err := loadRing(o)
	if err != nil {
		return err
	}
	jwtKey, err := loadJWTKey(*o)
	if err != nil {
		return err
	}
	// The system clock, its steps absorbed gradually (see package slewclock).
	clock := slewclock.New(log)
	tokens, err := auth.NewTokens(jwtKey, auth.DefaultTokenTTL, clock)
	if err != nil {
		return usageError{err}
	}

	st, mres, err := openMigrated(ctx, o.databaseURL, o.sqliteCacheMB)
	if err != nil {
		return err
	}
	if mres.Applied > 0 {
		log.Info("database migrated", "applied", mres.Applied, "version", mres.Version)
	}
	// Go's memory limit (SQLite): intake, what is written to hosts and
	// the listeners report to it.
	mem := newMemLimit(o.goMemoryLimitMB, o.databaseURL, os.LookupEnv, clock.Now)
	// Webhooks arriving together share one commit (see store.GroupCommit).
	st = store.GroupCommit(st, store.GroupOptions{
		Flushers: groupFlushers(o.databaseURL),
		Observe:  func(n int, took time.Duration) { a.srv.ObserveInsertBatch(n, took) },
	})
	a.st = st
	if o.adminToken == "" {
		log.Warn("RELAY_ADMIN_TOKEN is not set: the admin API refuses every request")
		// No console session is valid without a token; deleting them makes
		// removing the token final: setting the same token again later
		// brings none of them back.
		n, err := st.SessionDeleteAll(ctx)
		if err != nil {
			return fmt.Errorf("end console sessions: %w", err)
		}
		if n > 0 {
			log.Info("console sessions ended: RELAY_ADMIN_TOKEN is not set", "ended", n)
		}
	}
	if o.publicURL == "" && !loopbackListen(o.listen) {
		log.Warn("RELAY_PUBLIC_URL is not set: webhook URLs the admin API answers are built from each request's Host header, which the client chooses; set RELAY_PUBLIC_URL in production", "listen", o.listen)
	}

	presence := alert.PresenceConfig{LateAfter: o.hostLateAfter, OfflineAfter: o.hostOfflineAfter}
	oneWriter := strings.HasPrefix(o.databaseURL, "sqlite:") // embedded: one process, one writer
	srv := server.New(st, ring, tokens, clock, log, server.Config{
		OneReplica: oneWriter,
		AdminToken: o.adminToken, PublicURL: o.publicURL, LeaseFor: o.lease, HeartbeatFloor: o.heartbeatFloor,
		RateLimitPerMin: o.rateLimit, RateLimitBurst: o.rateBurst, QuarantineMax: o.quarantineMax,
		QuarantineMaxBytes: int64(o.quarantineMB) << 20,
		TrustedProxies:     o.proxies(),
		QuarantineHostMax:  o.quarantineHostMax, QuarantineHostMaxBytes: int64(o.quarantineHostMB) << 20,
		QuarantinePerMin:   o.quarantinePerMin,
		AuthFailuresPerMin: o.authFailures,
		Presence:           presence,
		AlertSinkAllow:     o.sinkAllow(),
		Tracer:             tracer,
		InflightBytes:      int64(o.inflightMB) << 20,
		InflightHostBytes:  int64(o.inflightHostMB) << 20,
		InflightIPBytes:    int64(o.inflightIPMB) << 20,
		InflightChanged:    mem.inflightFunc(),
		OutgoingChanged:    mem.outgoingFunc(),
		IPSetRefresh:       o.ipSetRefresh,
		IPSetURLs:          o.ipSetURLMap(),
	})
	a.srv = srv
	if err := srv.ReportCanary(ctx); err != nil {
		return err
	}
	// The alert rules run on every replica; the one holding the
	// evaluator's lease evaluates and notifies.
	alerts := alert.New(st, ring, alert.Config{
		Interval: o.alertInterval, Resend: o.alertResend, Presence: presence, PublicURL: o.publicURL, SinkAllow: o.sinkAllow(),
		KeysOK: func(ctx context.Context) (bool, error) {
			cs, err := intake.CheckCanary(ctx, st, ring)
			return cs.OK, err
		},
		Intake5xx: srv.Intake5xx,
	}, clock, log)
	srv.RegisterMetrics(alerts.Metrics().Collectors()...)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	a.ln = ln
	_, httpsPort, _ := net.SplitHostPort(ln.Addr().String())
	a.tls, err = o.tlsSetup(httpsPort, log)
	if err != nil {
		return err
	}
	// The console, on the same listener: its cookie is Secure when the
	// cloud serves TLS or is reached over https.
	con := console.New(console.Deps{
		App: srv, Store: st, Clock: clock, Log: log,
		CSRFKey:      tokens.DerivedKey("console csrf"),
		SecureCookie: a.tls != nil || strings.HasPrefix(strings.ToLower(o.publicURL), "https://"),
		Volume:       console.ReceivedPerHour(st),
	})
	if w := plainHTTPWarning(o, a.tls != nil); w != "" {
		log.Warn(w, "listen", o.listen, "public_url", o.publicURL)
	}
	srv.Mount(console.Path+"/", con.Routes, con.NotFound)
	handler := srv.Handler()
	if a.tls != nil {
		handler = tlsconf.HSTS(handler)
		if strings.HasPrefix(o.publicURL, "http://") {
			log.Warn("RELAY_PUBLIC_URL is http:// while the cloud serves HTTPS: the webhook URLs the admin API answers point at plain HTTP", "public_url", o.publicURL)
		}
	}
	httpSrv := server.NewHTTPServer(handler, server.DefaultTimeouts, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	// Heartbeats waiting for work (wait_s) are answered at once on shutdown.
	httpSrv.RegisterOnShutdown(srv.StopWaiting)
	// The plain-HTTP listener only redirects (and answers ACME challenges):
	// its requests are small and short.
	if o.httpRedirectListen != "" {
		a.redirectLn, err = net.Listen("tcp", o.httpRedirectListen)
		if err != nil {
			return fmt.Errorf("listen (RELAY_HTTP_REDIRECT_LISTEN): %w", err)
		}
		a.redirectLn = mem.listener(a.redirectLn)
	}
	a.ln = mem.listener(srv.LimitConnsPerIP(ln, o.maxConnsPerIP))

	// Background upkeep runs on every replica: each job is safe to run at once.
	expire := sweep.ExpireLeases(st, delivery.DefaultRetryPolicy, srv.Groups())
	expireLeases := expire.Do
	expire.Do = func(ctx context.Context, now time.Time) (int, error) {
		n, err := expireLeases(ctx, now)
		srv.ObserveLeaseExpiries(n)
		return n, err
	}
	jobs := []sweep.Job{
		expire,
		sweep.Retention(clock, retentionBatchTime(oneWriter), append(sweep.DeliveryPruners(st, o.retainAcked, o.retainDLQ),
			sweep.Pruner{Name: "rejections", Retain: o.retainRejected, Prune: st.RejectionPrune})...),
		sweep.ExpireClaimCodes(st),
		sweep.FoldCounts(st),
		sweep.FoldVolume(st),
		sweep.Statistics(st),
	}
	sweeper := &sweep.Runner{Clock: clock, Log: log, Jobs: jobs, Metrics: sweep.NewMetrics(jobs...)}
	srv.RegisterMetrics(sweeper.Metrics.Collectors()...)
	for _, loop := range []func(context.Context){
		sweeper.Run,
		func(ctx context.Context) { srv.RunQuarantineRelease(ctx, time.Minute) },
		srv.RunWakeups,
		srv.RunGroups,
		srv.RunRollCall,
		srv.RunIPSetRefresh,
		alerts.Run,
		a.reloadOnHUP,
	} {
		a.group.Go(func() error { loop(a.groupCtx); return nil })
	}

	a.http = httpSrv
	if a.tls != nil {
		httpSrv.TLSConfig = a.tls.TLS
		a.group.Go(func() error { return served(httpSrv.ServeTLS(a.ln, "", "")) })
	} else {
		a.group.Go(func() error { return served(httpSrv.Serve(a.ln)) })
	}
	if a.redirectLn != nil {
		a.redirect = &http.Server{
			Handler:           a.tls.HTTP,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       30 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		redirect, redirectLn := a.redirect, a.redirectLn
		a.group.Go(func() error { return served(redirect.Serve(redirectLn)) })
		log.Info("redirecting plain HTTP to HTTPS", "addr", redirectLn.Addr().String())
	}
	log.Info("cloud listening", "addr", a.ln.Addr().String(), "tls", tlsMode(*o), "database", redactURL(o.databaseURL), "version", buildinfo.Version(), "commit", buildinfo.Commit())
	return nil
}

// served is what an HTTP server's Serve returned, nil once Shutdown
// stopped it.
func served(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// reloadOnHUP reads the secret key ring (see reloadKeys) and the TLS
// certificate again on every SIGHUP, until ctx is done.
func (a *app) reloadOnHUP(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.hup:
			reloadKeys(ctx, &a.o, a.srv, a.log)
			if a.tls != nil {
				if err := a.tls.Reload(); err != nil {
					a.log.Error("TLS certificate not reloaded: the previous one is kept", "err", err)
				}
			}
		}
	}
}

// Run serves until ctx is done (SIGINT, SIGTERM) or an HTTP server fails,
// then closes the app.
func (a *app) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		a.log.Info("shutting down")
	case <-a.groupCtx.Done(): // an HTTP server failed: Close says why
	}
	return a.Close()
}

// Close stops the app in order, as far as Open got: the HTTP servers stop
// accepting and drain (heartbeats waiting for work are answered at once,
// sockets are told to close and waited for), then the loops stop, then
// the store closes and the last traces are exported. It returns why an
// HTTP server failed, or else what went wrong draining.
func (a *app) Close() error {
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var err error
	if a.http != nil {
		err = a.http.Shutdown(shutCtx)
		// Sockets were told to close (StopWaiting) and release what they
		// pushed; the server's Shutdown does not wait for them.
		if werr := a.srv.WaitSockets(shutCtx); err == nil {
			err = werr
		}
	}
	if a.redirect != nil {
		_ = a.redirect.Shutdown(shutCtx)
	}
	a.stopLoops()
	failed := a.group.Wait()
	// Shutdown closed the listeners it served; not those Open got before
	// it failed.
	for _, ln := range []net.Listener{a.ln, a.redirectLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if a.st != nil {
		a.st.Close()
	}
	if a.hup != nil {
		signal.Stop(a.hup)
	}
	if a.shutdownTracing != nil {
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.shutdownTracing(tctx); err != nil {
			a.log.Warn("trace export at exit", "err", err)
		}
	}
	switch {
	case failed != nil:
		return fmt.Errorf("serve: %w", failed)
	case err != nil:
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// retentionBatchTime is how long a retention transaction may hold the
// store: short where intake's commits wait for it (one writer).
func retentionBatchTime(oneWriter bool) time.Duration {
	if oneWriter {
		return sweep.OneWriterBatchTime
	}
	return 0
}
