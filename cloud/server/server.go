// Package server is the cloud's HTTP API: webhook intake from providers, the
// host protocol (claim, token, heartbeat, socket) and the admin API.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/limits"
	"github.com/relaykit/relay/cloud/openapi"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/transport"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/telemetry"
)

// Config holds the server's settings; zero values take the defaults.
type Config struct {
	// OneReplica: no other replica shares this cloud's store (embedded
	// SQLite), so a host's next poll comes here: answered long polls park
	// for it and the marks of their answers wait for its ack
	// (delivery.Config.ParkPolls, DeferPollMarks). Otherwise answered long
	// polls park, and the marks of their answers wait, while the replicas'
	// roll call finds this one alone (RunRollCall).
	OneReplica      bool
	AdminToken      string        // bearer token of the admin API; "" disables it
	PublicURL       string        // base URL providers and hosts use; "" derives from requests
	HeartbeatFloor  time.Duration // the shortest heartbeat interval hosts may use (default 1 s)
	LeaseFor        time.Duration // lease on handed-out deliveries (default 2 min)
	ClaimTTL        time.Duration // life of a claim code (default 24 h)
	MaxBatchBytes   int           // raw body bytes per heartbeat answer (default 4 MiB)
	MaxHeartbeatReq int64         // largest heartbeat request body (default 4 MiB)
	MaxWait         time.Duration // longest a heartbeat's wait_s holds it (default 25 s)
	RateLimitPerMin int           // per-host intake rate limit unless the host sets its own (default 100)
	RateLimitBurst  int           // per-host burst unless the host sets its own (default: RateLimitPerMin)
	QuarantineMax   int           // requests kept while their secret cannot be decrypted (default 10,000)
	// QuarantineMaxBytes bounds the quarantined requests (bodies, headers,
	// URLs) in all (default 1 GiB).
	QuarantineMaxBytes int64
	TrustedProxies     []string // proxies whose X-Forwarded-For names the client (default: none)
	// QuarantineHostMax and QuarantineHostMaxBytes are each host's share of
	// the quarantine (default: a tenth of QuarantineMax and
	// QuarantineMaxBytes), so that one host's flood leaves the others room.
	QuarantineHostMax      int
	QuarantineHostMaxBytes int64
	// QuarantinePerMin is how many requests a host may have quarantined a
	// minute (default 60, as a burst too).
	QuarantinePerMin int
	// AuthFailuresPerMin is how many failed claims, token requests and admin
	// logins a client IP may make a minute (and at once) before it is
	// answered 429 (default 10).
	AuthFailuresPerMin int
	// Presence says when a host is late or offline (GET /api/hosts).
	Presence alert.PresenceConfig
	// AlertSinkAllow lists the networks alert sinks may reach although
	// they are refused by default (see alert.Config.SinkAllow): a sink
	// whose URL is a refused IP address not listed here is not added.
	AlertSinkAllow []netip.Prefix
	// Tracer starts the intake, store and lease spans of each webhook's
	// trace (nil: none exported).
	Tracer *telemetry.Tracer
	// Request-body bytes intake holds at once: in all (default 256 MiB),
	// per host (64 MiB) and per client address (32 MiB); a request that
	// cannot get its share within BodyBudgetWait (default 2 s) gets 503.
	InflightBytes     int64
	InflightHostBytes int64
	InflightIPBytes   int64
	BodyBudgetWait    time.Duration
	// InflightChanged, if set, is told the request-body bytes intake holds
	// in all after each change, in order (the cloud raises Go's memory
	// limit by them).
	InflightChanged func(bytes int64)
	// OutgoingChanged, if set, is told each change (+ or −) of the body
	// bytes of leased deliveries the server holds while it encodes and
	// writes them to hosts (socket pushes, heartbeat answers): the cloud
	// raises Go's memory limit by them too.
	OutgoingChanged func(delta int64)
	// IPSetRefresh is how often the named IP sets are refreshed from
	// where their providers publish them (0: never; RunIPSetRefresh).
	// IPSetURLs gives a set another URL to be refreshed from, by name;
	// IPSetClient fetches them (nil: http.DefaultClient).
	IPSetRefresh time.Duration
	IPSetURLs    map[string]string
	IPSetClient  *http.Client
}

func (c *Config) setDefaults() {
	if c.HeartbeatFloor <= 0 {
		c.HeartbeatFloor = time.Second
	}
	if c.LeaseFor <= 0 {
		c.LeaseFor = 2 * time.Minute
	}
	if c.ClaimTTL <= 0 {
		c.ClaimTTL = 24 * time.Hour
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxHeartbeatReq <= 0 {
		c.MaxHeartbeatReq = 4 << 20
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 25 * time.Second
	}
	if c.RateLimitPerMin <= 0 {
		c.RateLimitPerMin = 100
	}
	if c.RateLimitBurst <= 0 {
		c.RateLimitBurst = c.RateLimitPerMin
	}
	if c.QuarantineMax <= 0 {
		c.QuarantineMax = 10000
	}
	if c.QuarantineMaxBytes <= 0 {
		c.QuarantineMaxBytes = 1 << 30
	}
	if c.QuarantineHostMax <= 0 {
		c.QuarantineHostMax = max(1, c.QuarantineMax/10)
	}
	if c.QuarantineHostMaxBytes <= 0 {
		c.QuarantineHostMaxBytes = max(1, c.QuarantineMaxBytes/10)
	}
	if c.QuarantinePerMin <= 0 {
		c.QuarantinePerMin = 60
	}
	if c.AuthFailuresPerMin <= 0 {
		c.AuthFailuresPerMin = 10
	}
	if c.InflightBytes <= 0 {
		c.InflightBytes = 256 << 20
	}
	if c.InflightHostBytes <= 0 {
		c.InflightHostBytes = 64 << 20
	}
	if c.InflightIPBytes <= 0 {
		c.InflightIPBytes = 32 << 20
	}
	if c.BodyBudgetWait <= 0 {
		c.BodyBudgetWait = 2 * time.Second
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
}

// Server serves the cloud's API over one store.
type Server struct {
	store  Store
	ring   *secrets.Ring
	tokens *auth.Tokens
	clock  clockwork.Clock
	log    *slog.Logger
	cfg    Config

	// proxies are Config.TrustedProxies, for ViaHTTPS.
	proxies []netip.Prefix

	limits     *limits.Buckets     // intake rate limits
	logSample  *limits.Sampler     // over-limit warnings logged per host and minute
	authLimits *limits.AuthLimiter // failed authentications per client IP
	authLog    *limits.LogBudget   // failed authentications logged
	accessLogs *limits.LogBudget   // 4xx and 5xx access log lines, per route and status
	metrics    *metrics
	deliveries *delivery.Service
	groups     *delivery.Groups      // which member of a group holds its any deliveries
	rollCall   *delivery.RollCall    // the replicas sharing the store; nil for one replica
	intake     *intake.Service       // a provider's request becomes a stored delivery
	leaser     intake.Leaser         // leases at intake to a host's socket or waiting long poll
	hosts      *transport.Transports // the hosts' long polls and sockets
	conns      *delivery.Connections // the hosts' sockets across replicas
	bodies     *limits.BodyBudget    // intake's request bodies in flight
	mounts     []mount
	// ipSetsRefreshed, when set (by tests), is called after each
	// scheduled refresh of the named IP sets.
	ipSetsRefreshed func()
}

// mount is what Mount added.
type mount struct {
	prefix   string
	routes   func(gin.IRouter)
	notFound gin.HandlerFunc
}

// Mount adds routes served beside the API (the console), on the same
// listener and behind the same recovery and access log; a request whose
// path starts with prefix and matches no route is answered by notFound
// (nil: the API's JSON error). Call it before Handler.
func (s *Server) Mount(prefix string, routes func(gin.IRouter), notFound gin.HandlerFunc) {
	s.mounts = append(s.mounts, mount{prefix: prefix, routes: routes, notFound: notFound})
}

// New returns a server. All dependencies are required.
func New(st Store, ring *secrets.Ring, tokens *auth.Tokens, clock clockwork.Clock, log *slog.Logger, cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{
		store: st, ring: ring, tokens: tokens, clock: clock, log: log, cfg: cfg, proxies: trustedPrefixes(cfg.TrustedProxies),
		limits:     limits.NewBuckets(),
		logSample:  limits.NewSampler(6, 1),
		authLimits: limits.NewAuthLimiter(cfg.AuthFailuresPerMin, maxAuthClients),
		authLog:    limits.NewLogBudget(authLogPerMin),
		accessLogs: limits.NewLogBudget(accessLogPerMin),
		metrics:    newMetrics(),
		bodies:     limits.NewBodyBudget(clock, cfg.BodyBudgetWait, cfg.InflightBytes, cfg.InflightHostBytes, cfg.InflightIPBytes),
	}
	s.groups = delivery.NewGroups(st, delivery.GroupsConfig{OnlineWithin: cfg.Presence.LateAfter}, clock, log)
	s.deliveries = delivery.New(st, delivery.Config{LeaseFor: cfg.LeaseFor, MaxBatchBytes: cfg.MaxBatchBytes,
		MaxWait: cfg.MaxWait, Changed: func(hostID string) { s.intake.Forget(hostID) }, Observer: s.metrics, Tracer: cfg.Tracer,
		Groups: s.groups, ParkPolls: cfg.OneReplica, DeferPollMarks: cfg.OneReplica}, clock, log)
	if !cfg.OneReplica {
		s.rollCall = delivery.NewRollCall(st, s.deliveries, clock, log)
	}
	s.conns = delivery.NewConnections(st, clock, log, transport.SocketTakeover)
	s.leaser = delivery.NewIntake(s.conns, s.deliveries)
	s.hosts = transport.New(transport.Config{Edge: hostEdge{s}, Deliveries: s.deliveries, Conns: s.conns, Tokens: tokens,
		Metrics: s.metrics, Clock: clock, Log: log, MaxHeartbeatReq: cfg.MaxHeartbeatReq,
		HeartbeatFloor: cfg.HeartbeatFloor, OutgoingChanged: cfg.OutgoingChanged})
	s.intake = intake.New(s.intakeConfig(intake.Config{}))
	s.deliveries.OnSocket(func(e store.SocketEvent) {
		s.conns.Observe(e)
		s.groups.Socket(e)
	})
	// Targets hold their sets' prefixes: a set stored anew by any replica
	// drops them all.
	s.deliveries.OnIPSetChanged(func(string) { s.intake.ForgetAll() })
	s.bodies.Changed = cfg.InflightChanged
	s.metrics.reg.MustRegister(bodyGauge(s.bodies), s.replicasGauge())
	return s
}

// Groups is the router of groups' any deliveries (for the sweeper's
// lease expiry).
func (s *Server) Groups() *delivery.Groups { return s.groups }

// RunGroups reads the groups' rosters and hands the deliveries of members
// that are not online to those that are, until ctx ends.
func (s *Server) RunGroups(ctx context.Context) { s.groups.Run(ctx) }

// RunRollCall takes part in the roll call of the replicas sharing the
// store until ctx ends (delivery.RollCall); with one replica by design, it
// returns at once.
func (s *Server) RunRollCall(ctx context.Context) {
	if s.rollCall != nil {
		s.rollCall.Run(ctx)
	}
}

// hostEdge is the edge the hosts' transports are mounted on.
type hostEdge struct{ s *Server }

func (e hostEdge) AuthHost(c *gin.Context) (*store.Host, error) { return e.s.authHost(c) }
func (e hostEdge) WriteError(c *gin.Context, err error)         { e.s.writeError(c, err) }
func (e hostEdge) DecodeJSON(c *gin.Context, limit int64, v any) error {
	return decodeJSON(c, limit, v)
}

// intakeConfig is base with the server's dependencies and bounds.
func (s *Server) intakeConfig(base intake.Config) intake.Config {
	cfg := s.cfg
	base.Store, base.Ring, base.Leaser, base.Metrics, base.Groups = s.store, s.ring, s.leaser, s.metrics, s.groups
	base.Tracer, base.Now, base.Log = cfg.Tracer, s.now, s.log
	base.TokenKey = func() []byte { return s.tokens.DerivedKey("quarantined token hashes") }
	base.IPSetURLs, base.IPSetClient = cfg.IPSetURLs, cfg.IPSetClient
	base.QuarantineMax, base.QuarantineMaxBytes = cfg.QuarantineMax, cfg.QuarantineMaxBytes
	base.QuarantineHostMax, base.QuarantineHostMaxBytes = cfg.QuarantineHostMax, cfg.QuarantineHostMaxBytes
	base.QuarantinePerMin = cfg.QuarantinePerMin
	return base
}

// Handler returns the HTTP handler with every route.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// Routes match the path as sent, each parameter unescaped on its own:
	// a delivery id with a '/' (github:a/b:1) is reached as github:a%2Fb:1.
	r.UseRawPath = true
	r.UnescapePathValues = true
	if err := r.SetTrustedProxies(s.cfg.TrustedProxies); err != nil {
		// Validated by New's caller; an invalid entry trusts no one.
		s.log.Error("trusted proxies ignored", "err", err)
		_ = r.SetTrustedProxies(nil)
	}
	r.NoRoute(func(c *gin.Context) {
		for _, m := range s.mounts {
			if m.notFound != nil && strings.HasPrefix(c.Request.URL.Path, m.prefix) {
				m.notFound(c)
				return
			}
		}
		notFoundHandler(c)
	})
	r.NoMethod(methodNotAllowedHandler)
	r.Use(s.recoverer, s.accessLog)

	r.GET("/healthz", func(c *gin.Context) { c.JSON(200, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)
	r.GET(openapi.Path, func(c *gin.Context) { c.Data(200, "application/json", openapi.Document) })
	r.GET("/metrics", s.requireAdmin, s.metrics.handler())
	r.GET("/api/quarantine", s.requireAdmin, s.listQuarantine)
	r.POST("/api/quarantine/release", s.requireAdmin, s.releaseQuarantine)
	r.POST("/api/quarantine/:id/release", s.requireAdmin, s.releaseHeld)
	r.DELETE("/api/console/sessions", s.requireAdmin, s.endConsoleSessions)

	alerts := r.Group("/api/alerts", s.requireAdmin)
	alerts.GET("", s.listAlerts)
	alerts.GET("/rules", s.listAlertRules)
	alerts.PUT("/rules/:rule", s.putAlertRule)
	alerts.DELETE("/rules/:rule", s.deleteAlertRule)
	alerts.GET("/sinks", s.listSinks)
	alerts.POST("/sinks", s.createSink)
	alerts.DELETE("/sinks/:sink", s.deleteSink)

	r.POST("/api/webhooks/:hostId/:source", s.receive)

	r.POST("/api/hosts/claim", s.claim)
	r.POST("/api/hosts/token", s.token)
	r.POST("/api/hosts/heartbeat", s.hosts.Heartbeat)
	r.GET(shared.PathSocket, s.hosts.Socket)
	r.GET(shared.PathHostDeliveries, s.hostDeliveries)
	r.GET(shared.PathHostSources, s.hostSources)

	r.GET("/api/deliveries", s.requireAdmin, s.findDeliveries)
	r.GET("/api/events", s.requireAdmin, s.listEvents)

	r.GET("/api/ipsets", s.requireAdmin, s.listIPSets)
	r.PUT("/api/ipsets/:name", s.requireAdmin, s.refreshIPSet)

	admin := r.Group("/api/hosts", s.requireAdmin)
	admin.POST("", s.createHost)
	admin.GET("", s.listHosts)
	admin.GET("/:id", s.getHost)
	admin.PATCH("/:id", s.updateHost)
	admin.POST("/:id/deactivate", s.deactivateHost)
	admin.POST("/:id/claim-code", s.newClaimCode)
	admin.GET("/:id/sources", s.listSources)
	admin.GET("/:id/sources/:source", s.getSource)
	admin.PUT("/:id/sources/:source", s.putSource)
	admin.PATCH("/:id/sources/:source", s.patchSource)
	admin.GET("/:id/rejections", s.listRejections)
	admin.GET("/:id/webhooks", s.listDeliveries)
	admin.GET("/:id/webhooks/:deliveryId", s.getDelivery)
	admin.POST("/:id/webhooks/:deliveryId/retry", s.retryDelivery)
	admin.POST("/:id/webhooks/:deliveryId/replay", s.replayDelivery)
	// Another method than GET's /:id/webhooks/:deliveryId: no clash.
	admin.DELETE("/:id/webhooks/dlq", s.purgeDLQ)
	admin.PUT("/:id/alert-rules/:rule", s.putAlertRule)
	admin.DELETE("/:id/alert-rules/:rule", s.deleteAlertRule)

	groups := r.Group("/api/groups", s.requireAdmin, s.checkGroupID)
	groups.POST("", s.createGroup)
	groups.GET("", s.listGroups)
	groups.GET("/:id", s.getGroup)
	groups.PATCH("/:id", s.updateGroup)
	groups.POST("/:id/deactivate", s.deactivateGroup)
	groups.PUT("/:id/members/:hostId", s.putMember)
	groups.DELETE("/:id/members/:hostId", s.deleteMember)
	groups.GET("/:id/sources", s.listGroupSources)
	groups.GET("/:id/sources/:source", s.getGroupSource)
	groups.PUT("/:id/sources/:source", s.putGroupSource)
	groups.PATCH("/:id/sources/:source", s.patchGroupSource)
	for _, m := range s.mounts {
		m.routes(r)
	}
	return r
}

func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.writeError(c, shared.Unavailable(err))
		return
	}
	c.JSON(200, gin.H{"status": "ok"})
}

func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeError(c, fmt.Errorf("panic: %v", v))
		}
	}()
	c.Next()
}

// accessLogPerMin bounds the access log's lines for failed requests, per
// route and status: anyone can send requests that fail.
const accessLogPerMin = 60

// accessLog logs each request by route pattern (never the query string or
// headers, which may carry credentials): successes at debug, failures at
// info, at most accessLogPerMin a minute per route and status, each saying
// how many like it went unlogged before it.
func (s *Server) accessLog(c *gin.Context) {
	start := s.clock.Now()
	c.Next()
	status, route := c.Writer.Status(), c.FullPath()
	level, unlogged := slog.LevelDebug, 0
	if status >= 400 {
		var ok bool
		if ok, unlogged = s.accessLogs.Take(route+" "+strconv.Itoa(status), s.clock.Now()); !ok {
			return
		}
		level = slog.LevelInfo
	}
	if !s.log.Enabled(c.Request.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", c.Request.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Duration("took", s.clock.Since(start)),
	}
	if unlogged > 0 {
		attrs = append(attrs, slog.Int("unlogged_before", unlogged))
	}
	s.log.LogAttrs(c.Request.Context(), level, "http", attrs...)
}

// requireAdmin checks the admin bearer token (CheckAdminLogin). Without a
// configured token the admin API refuses everything.
func (s *Server) requireAdmin(c *gin.Context) {
	tok, _ := auth.Bearer(c.Request)
	if wait, err := s.CheckAdminLogin(c, tok); err != nil {
		var ae *shared.Error
		if errors.As(err, &ae) {
			switch ae.Code {
			case shared.CodeNotImplemented:
				err = &shared.Error{Code: ae.Code, Message: "admin API disabled: set RELAY_ADMIN_TOKEN"}
			case shared.CodeRateLimited:
				c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
				err = &shared.Error{Code: ae.Code, Message: "too many failed attempts from this address: retry after the time in Retry-After"}
			case shared.CodeUnauthorized:
				c.Header("WWW-Authenticate", `Bearer realm="relay-admin"`)
				err = shared.Unauthorized("missing or wrong admin token")
			}
		}
		s.writeError(c, err)
		return
	}
	c.Next()
}

// decodeJSON reads a JSON request body of at most limit bytes into v,
// answering-ready errors for oversize and malformed input (naming the field
// and the kind of value it takes, never a Go type). The body is
// parsed as JSON whatever its Content-Type says (curl -d sends form).
func decodeJSON(c *gin.Context, limit int64, v any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &shared.Error{Code: shared.CodeTooLarge, Message: fmt.Sprintf("request body over %d bytes", limit)}
		}
		if errors.Is(err, io.EOF) {
			return shared.Invalid("request body is empty: want a JSON object")
		}
		return shared.Invalid(shared.DescribeJSONError(err))
	}
	if dec.More() {
		return shared.Invalid("malformed JSON: trailing data after the object")
	}
	return nil
}

// now is the server's clock, truncated to the milliseconds stores keep.
func (s *Server) now() time.Time { return s.clock.Now().UTC().Truncate(time.Millisecond) }
