// Package localapi serves the host's read-only local HTTP API: the ledger of
// processed webhooks, a health check, and the host page (HTML) over both. It
// listens on a loopback address by default, carries no authentication, and
// answers only requests addressed to a loopback name or address (no DNS
// rebinding).
package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// Ledger is what the API reads.
type Ledger interface {
	// DeliveryGet returns ledger.ErrNotFound for an unknown delivery.
	DeliveryGet(ctx context.Context, deliveryID string) (ledger.Entry, error)
	// DeliveryList returns ledger.ErrInvalidCursor for a cursor it did not make.
	DeliveryList(ctx context.Context, p ledger.ListParams) ([]ledger.Entry, string, error)
	OutboxCount(ctx context.Context) (int, error)
	DeliveryCount(ctx context.Context) (int, error)
}

// Agent reports the heartbeat loop's state.
type Agent interface {
	// LastHeartbeat is when a heartbeat last succeeded (zero: never).
	LastHeartbeat() time.Time
	// LastHeartbeatError is why the last one failed ("" if it succeeded).
	LastHeartbeatError() string
	// Backlog counts leased webhooks waiting for a worker, and running handlers.
	Backlog() (queued, running int)
	Stopping() bool
	// Unrecordable says the ledger could not record an outcome lately (a
	// full disk): the agent takes no new work until it can.
	Unrecordable() bool
	// ClockSkew is how far this host's clock is ahead of the cloud's
	// (negative: behind), and false until the cloud said its time.
	ClockSkew() (time.Duration, bool)
	// Status is what the agent does now: its link to the cloud, the
	// handlers running and the work waiting (the page).
	Status() agent.Status
}

// List limits.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Server is the local API.
type Server struct {
	ledger   Ledger
	agent    Agent
	interval time.Duration
	started  time.Time
	clock    clockwork.Clock
	log      *slog.Logger
	mux      *http.ServeMux
	listenIP net.IP // also answered as a Host, see AllowListenHost
	metrics  *metrics
	cloudURL string // shown on the page (SetCloudURL)
}

// New returns the local API over l and a. interval is the agent's heartbeat
// interval: /healthz says "degraded" when no heartbeat succeeded for three
// of them.
func New(l Ledger, a Agent, interval time.Duration, clock clockwork.Clock, log *slog.Logger) *Server {
	s := &Server{ledger: l, agent: a, interval: interval, started: clock.Now(), clock: clock, log: log, mux: http.NewServeMux()}
	s.metrics = newMetrics(s)
	s.mux.Handle("GET /metrics", s.metrics.handler())
	s.mux.HandleFunc("GET /webhooks/ledger", s.handleList)
	s.mux.HandleFunc("GET /webhooks/ledger/{deliveryID...}", s.handleGet)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.routePages()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, shared.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return s
}

// ServeHTTP implements http.Handler. Only requests addressed to the host
// itself are answered (see hostAllowed); others get 421. Every answer —
// JSON, metrics, errors, and the pages, which add headers of their own —
// is marked nosniff and readable by its own origin only, so no other
// site's page can load it as a script, a stylesheet or an image.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !s.hostAllowed(r.Host) {
		writeError(w, shared.CodeMisdirected,
			"the local API answers only requests to 127.0.0.1, localhost or [::1]")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// AllowListenHost also answers requests addressed to the IP address the API
// listens on (--listen 192.168.1.5:7071), when that is an explicit address;
// names and the unspecified address (0.0.0.0, [::]) add nothing.
func (s *Server) AllowListenHost(listenAddr string) {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		s.listenIP = ip
	}
}

// hostAllowed reports whether a request's Host names this machine in a way
// DNS cannot rebind: "localhost", a loopback IP (127.0.0.1, [::1]) or the
// explicit IP the API listens on, with or without a port. A web page the
// operator visits can point a name of its own at 127.0.0.1, but its requests
// then carry that name, and are refused before they read the ledger.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || (s.listenIP != nil && ip.Equal(s.listenIP)))
}

type listResponse struct {
	Entries    []ledger.Entry `json:"entries"`
	NextCursor string         `json:"next_cursor"`
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	p, err := s.listParams(r)
	if err != nil {
		writeError(w, shared.CodeInvalid, err.Error())
		return
	}
	entries, next, err := s.ledger.DeliveryList(r.Context(), p)
	if errors.Is(err, ledger.ErrInvalidCursor) {
		writeError(w, shared.CodeInvalid, "invalid cursor: pass the next_cursor of a previous page")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, listResponse{Entries: entries, NextCursor: next})
}

func (s *Server) listParams(r *http.Request) (ledger.ListParams, error) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "result", "source", "since", "limit", "cursor":
		default:
			return ledger.ListParams{}, fmt.Errorf("unknown query parameter %q (allowed: result, source, since, limit, cursor)", k)
		}
	}
	p := ledger.ListParams{Limit: DefaultLimit, Source: q.Get("source"), Cursor: q.Get("cursor")}
	if v := q.Get("result"); v != "" {
		p.Result = ledger.Result(v)
		if !p.Result.Valid() {
			return p, fmt.Errorf("invalid result %q: want success, error or skipped", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return p, fmt.Errorf("invalid limit %q: want an integer from 1 to %d", v, MaxLimit)
		}
		p.Limit = n
	}
	if v := q.Get("since"); v != "" {
		since, err := ledger.ParseSince(v, s.clock.Now())
		if err != nil {
			return p, err
		}
		p.Since = since
	}
	return p, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("deliveryID")
	if id == "" {
		writeError(w, shared.CodeNotFound, "no delivery id given")
		return
	}
	e, err := s.ledger.DeliveryGet(r.Context(), id)
	if errors.Is(err, ledger.ErrNotFound) {
		writeError(w, shared.CodeNotFound, fmt.Sprintf("delivery %q is not in the ledger", id))
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

type healthResponse struct {
	// Status is "ok", or "degraded" when no heartbeat succeeded for three
	// heartbeat intervals (the cloud is unreachable or refuses the host) or
	// when the ledger cannot record outcomes.
	Status             string     `json:"status"`
	LastHeartbeatAt    *time.Time `json:"last_heartbeat_at"`
	LastHeartbeatError string     `json:"last_heartbeat_error,omitempty"`
	// Backlog: acks and nacks waiting to be reported (Outbox), leased
	// webhooks waiting for a worker (Queued), handlers running (Running).
	Outbox   int  `json:"outbox"`
	Queued   int  `json:"queued"`
	Running  int  `json:"running"`
	Stopping bool `json:"stopping"`
	// LedgerUnwritable: outcomes could not be recorded (a full disk); the
	// host takes no new work until they can.
	LedgerUnwritable bool `json:"ledger_unwritable,omitempty"`
	// Clock says whose clock the times are on: every time this API shows
	// (here and in the ledger) is this host's; the cloud's, which its
	// leases, retries and audit use, differs from it by the skew.
	Clock clockResponse `json:"clock"`
}

type clockResponse struct {
	HostNow time.Time `json:"host_now"`
	// CloudNow is the cloud's time now, as its last answer said it (absent
	// until one did); SkewS is HostNow less CloudNow, in seconds.
	CloudNow *time.Time `json:"cloud_now,omitempty"`
	SkewS    *int64     `json:"skew_s,omitempty"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	h, err := s.health(r.Context())
	if err != nil {
		s.log.Error("health: ledger unreadable", "err", err)
		writeError(w, shared.CodeUnavailable, "ledger unreadable")
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// health is what /healthz says, and the page's status.
func (s *Server) health(ctx context.Context) (healthResponse, error) {
	n, err := s.ledger.OutboxCount(ctx)
	if err != nil {
		return healthResponse{Status: "degraded"}, err
	}
	queued, running := s.agent.Backlog()
	h := healthResponse{Status: "ok", Outbox: n, Queued: queued, Running: running, Stopping: s.agent.Stopping(),
		LastHeartbeatError: s.agent.LastHeartbeatError()}
	last := s.agent.LastHeartbeat()
	if !last.IsZero() {
		t := last.UTC()
		h.LastHeartbeatAt = &t
	} else {
		last = s.started
	}
	h.LedgerUnwritable = s.agent.Unrecordable()
	now := s.clock.Now()
	h.Clock.HostNow = now.UTC().Truncate(time.Second)
	if skew, ok := s.agent.ClockSkew(); ok {
		cloud := now.Add(-skew).UTC().Truncate(time.Second)
		secs := int64(skew / time.Second)
		h.Clock.CloudNow, h.Clock.SkewS = &cloud, &secs
	}
	if now.Sub(last) > 3*s.interval || h.LedgerUnwritable {
		h.Status = "degraded"
	}
	return h, nil
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("local api", "err", err)
	writeError(w, shared.CodeInternal, "internal error")
}

// writeError answers code and msg in the common error shape, with the
// code's status (shared.HTTPStatus).
func writeError(w http.ResponseWriter, code, msg string) {
	writeJSON(w, shared.HTTPStatus(code), shared.ErrorResponse{Error: shared.ErrorDetail{Code: code, Message: strings.TrimSpace(msg)}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
