package server

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// hostJSON is a host as the admin API shows it (no hashes).
type hostJSON struct {
	ID              string               `json:"id"`
	Name            string               `json:"name"`
	Status          store.HostStatus     `json:"status"`
	Claimed         bool                 `json:"claimed"`
	ClaimedAt       *time.Time           `json:"claimed_at"`
	ClaimExpiresAt  *time.Time           `json:"claim_expires_at,omitempty"`
	AgentVersion    string               `json:"agent_version"`
	LastHeartbeatAt *time.Time           `json:"last_heartbeat_at"`
	RateLimitPerMin int                  `json:"rate_limit_per_min"`
	RateLimitBurst  int                  `json:"rate_limit_burst"`
	CreatedAt       time.Time            `json:"created_at"`
	DeactivatedAt   *time.Time           `json:"deactivated_at,omitempty"`
	Counts          map[store.Status]int `json:"counts"`
	WebhookURL      string               `json:"webhook_url"`
	// RateLimit is what intake applies: the host's own limits, the
	// cloud's default for each that is 0.
	RateLimit rateLimitJSON `json:"rate_limit"`
	// Presence is online, late or offline for an active, claimed host
	// (from its last contact), else left out.
	Presence store.Presence `json:"presence,omitempty"`
	// PresenceHistory is the host's recorded presence changes, newest
	// first (GET /api/hosts/:id only).
	PresenceHistory []presenceEventJSON `json:"presence_history,omitempty"`
}

type rateLimitJSON struct {
	PerMin int `json:"per_min"`
	Burst  int `json:"burst"`
}

// presenceEventJSON is one presence change: went to To at At, after From
// lasted LastedS seconds.
type presenceEventJSON struct {
	At      time.Time      `json:"at"`
	From    store.Presence `json:"from,omitempty"`
	To      store.Presence `json:"to"`
	LastedS float64        `json:"lasted_s"`
}

func (s *Server) hostView(c *gin.Context, h *store.Host, counts map[store.Status]int, now time.Time) hostJSON {
	full := make(map[store.Status]int, len(store.Statuses))
	for _, st := range store.Statuses {
		full[st] = counts[st]
	}
	v := hostJSON{
		ID: h.ID, Name: h.Name, Status: h.Status, Claimed: h.CredentialHash != nil, ClaimedAt: h.ClaimedAt,
		AgentVersion: h.AgentVersion, LastHeartbeatAt: h.LastHeartbeatAt,
		RateLimitPerMin: h.RateLimitPerMin, RateLimitBurst: h.RateLimitBurst,
		CreatedAt: h.CreatedAt, DeactivatedAt: h.DeactivatedAt, Counts: full,
		WebhookURL: s.publicURL(c) + shared.PathWebhooks + "/" + h.ID + "/{source}",
	}
	if h.ClaimCodeHash != nil {
		v.ClaimExpiresAt = h.ClaimExpiresAt
	}
	v.RateLimit.PerMin, v.RateLimit.Burst = s.HostRate(h)
	v.Presence = s.presenceAt(h, now)
	return v
}

// PublicURL is RELAY_PUBLIC_URL, or the base URL the request came in on.
func (s *Server) PublicURL(c *gin.Context) string { return s.publicURL(c) }

func (s *Server) publicURL(c *gin.Context) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if c.Request.TLS != nil || strings.EqualFold(c.GetHeader("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}

func (s *Server) createHost(c *gin.Context) {
	var req shared.CreateHostRequest
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	out, err := s.CreateHost(c.Request.Context(), req.Name)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(201, out)
}

// CreateHost registers a host and answers its one-time claim code, as POST
// /api/hosts does. Errors are the API's (see Describe).
func (s *Server) CreateHost(ctx context.Context, name string) (*shared.CreateHostResponse, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 200 {
		return nil, shared.Invalid("name is required (1 to 200 characters)")
	}
	now := s.now()
	code := auth.NewClaimCode()
	id := auth.NewHostID()
	h, err := s.store.HostCreate(ctx, &store.HostCreateParams{
		ID: id, Name: name,
		ClaimCodeHash: auth.Hash(code), ClaimExpiresAt: now.Add(s.cfg.ClaimTTL),
		Now: now, // rate limits 0: the server's defaults
	})
	s.intake.Forget(id) // even on an error: it may have committed
	if err != nil {
		return nil, err
	}
	return &shared.CreateHostResponse{ID: h.ID, Name: h.Name, ClaimCode: code, ClaimExpiresAt: *h.ClaimExpiresAt}, nil
}

// listHosts answers a page of hosts, oldest first, with their counts: at
// most limit (1–500, default 100), after the cursor (the next_cursor of the
// page before; "" on the last page), of one presence when asked (the
// store reads on through the hosts until the page is full).
func (s *Server) listHosts(c *gin.Context) {
	presence := store.Presence(c.Query("presence"))
	switch presence {
	case "", store.PresenceOnline, store.PresenceLate, store.PresenceOffline:
	default:
		s.writeError(c, shared.Invalid("presence must be online, late or offline"))
		return
	}
	limit, err := queryLimit(c, 100, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	after, afterID, err := queryCursor(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	// One more than the page says whether there is a next page. The
	// filter's cuts and each host's presence are taken at the same now.
	now := s.now()
	p := &store.HostPageParams{Limit: limit + 1, AfterCreatedAt: after, AfterID: afterID, Presence: presence}
	if presence != "" {
		p.LateCut, p.OfflineCut = s.cfg.Presence.Cuts(now)
	}
	hosts, err := s.store.HostListWithCounts(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	next := ""
	if len(hosts) > limit {
		hosts = hosts[:limit]
		last := hosts[limit-1].Host
		next = EncodeCursor(last.CreatedAt, last.ID)
	}
	out := make([]hostJSON, len(hosts))
	for i, h := range hosts {
		out[i] = s.hostView(c, h.Host, h.Counts, now)
	}
	c.JSON(200, gin.H{"hosts": out, "next_cursor": next})
}

func (s *Server) getHost(c *gin.Context) {
	h, err := s.store.HostGet(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	s.writeHost(c, h)
}

func (s *Server) deactivateHost(c *gin.Context) {
	h, err := s.DeactivateHost(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeHost(c, h)
}

// DeactivateHost deactivates a host for good, revoking its tokens, as POST
// /api/hosts/:id/deactivate does. Errors are the API's (see Describe).
func (s *Server) DeactivateHost(ctx context.Context, hostID string) (*store.Host, error) {
	h, err := s.store.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: hostID, Now: s.now()})
	s.intake.Forget(hostID) // at once here; other replicas are told by the store
	if err != nil {
		return nil, hostErr(err)
	}
	s.log.Info("host deactivated", "host", h.ID)
	return h, nil
}

func (s *Server) newClaimCode(c *gin.Context) {
	out, err := s.NewClaimCode(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, out)
}

// NewClaimCode gives an active host a new one-time claim code, as POST
// /api/hosts/:id/claim-code does. Errors are the API's (see Describe).
func (s *Server) NewClaimCode(ctx context.Context, hostID string) (*shared.CreateHostResponse, error) {
	code := auth.NewClaimCode()
	h, err := s.store.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{
		HostID: hostID, ClaimCodeHash: auth.Hash(code), ClaimExpiresAt: s.now().Add(s.cfg.ClaimTTL),
	})
	if errors.Is(err, store.ErrNotFound) {
		// Unknown, or deactivated: a deactivated host cannot be claimed.
		if h, gerr := s.store.HostGet(ctx, hostID); gerr == nil && h.Status != store.HostActive {
			return nil, &shared.Error{Code: shared.CodeGone, Message: "host is deactivated: it cannot be claimed again"}
		}
	}
	if err != nil {
		return nil, hostErr(err)
	}
	return &shared.CreateHostResponse{ID: h.ID, Name: h.Name, ClaimCode: code, ClaimExpiresAt: *h.ClaimExpiresAt}, nil
}

// Presence is a host's presence from its last contact: online, late or
// offline for an active, claimed host, else "".
func (s *Server) Presence(h *store.Host) store.Presence { return s.presenceAt(h, s.now()) }

func (s *Server) presenceAt(h *store.Host, now time.Time) store.Presence {
	if h.Status == store.HostActive && h.CredentialHash != nil {
		return s.cfg.Presence.Of(h.LastHeartbeatAt, h.ClaimedAt, now)
	}
	return ""
}

// writeHost answers one host with its delivery counts and presence
// history.
func (s *Server) writeHost(c *gin.Context, h *store.Host) {
	counts, err := s.store.DeliveryCountByStatus(c.Request.Context(), h.ID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	events, err := s.store.PresenceEventList(c.Request.Context(), h.ID, 50)
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := s.hostView(c, h, counts, s.now())
	for _, e := range events {
		v.PresenceHistory = append(v.PresenceHistory, presenceEventJSON{At: e.At, From: e.From, To: e.To, LastedS: e.Lasted.Seconds()})
	}
	c.JSON(200, v)
}

func hostErr(err error) error { return notFoundAs(err, "no such host") }

// claim exchanges a one-time claim code for a host credential and a token.
func (s *Server) claim(c *gin.Context) {
	var req shared.ClaimRequest
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.ClaimCode == "" {
		s.writeError(c, shared.Invalid("claim_code is required"))
		return
	}
	at, ok := s.authAttempt(c)
	if !ok {
		return
	}
	cred := auth.NewCredential()
	h, err := s.store.HostClaim(c.Request.Context(), &store.HostClaimParams{
		ClaimCodeHash:  auth.Hash(auth.NormalizeClaimCode(req.ClaimCode)),
		CredentialHash: auth.Hash(cred),
		AgentVersion:   shared.Truncate(req.AgentVersion, 100),
		Now:            s.now(),
	})
	if errors.Is(err, store.ErrNotFound) {
		at.failed("claim code unknown, already used or expired")
		s.writeError(c, shared.Unauthorized("claim code unknown, already used or expired"))
		return
	}
	at.succeeded() // a storage failure is no failed attempt either
	if err != nil {
		s.writeError(c, err)
		return
	}
	tok, exp, err := s.tokens.Issue(h.ID, h.Generation)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.log.Info("host claimed", "host", h.ID, "agent_version", h.AgentVersion)
	c.JSON(200, shared.ClaimResponse{
		HostID: h.ID, HostCredential: cred, Token: tok, TokenExpiresAt: exp,
		HeartbeatIntervalS: s.hosts.IntervalS(),
	})
}

// token exchanges a host credential for a fresh token.
func (s *Server) token(c *gin.Context) {
	var req shared.TokenRequest
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.HostID == "" || req.HostCredential == "" {
		s.writeError(c, shared.Invalid("host_id and host_credential are required"))
		return
	}
	at, ok := s.authAttempt(c)
	if !ok {
		return
	}
	bad := shared.Unauthorized("unknown host or wrong credential")
	h, err := s.store.HostGet(c.Request.Context(), req.HostID)
	if errors.Is(err, store.ErrNotFound) {
		at.failed("unknown host")
		s.writeError(c, bad)
		return
	}
	if err != nil {
		at.succeeded() // a storage failure is no failed attempt
		s.writeError(c, err)
		return
	}
	if !auth.HashEqual(auth.Hash(req.HostCredential), h.CredentialHash) {
		at.failed("wrong host credential")
		s.writeError(c, bad)
		return
	}
	at.succeeded()
	if h.Status != store.HostActive {
		s.writeError(c, &shared.Error{Code: shared.CodeGone, Message: "host is deactivated"})
		return
	}
	tok, exp, err := s.tokens.Issue(h.ID, h.Generation)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, shared.TokenResponse{Token: tok, TokenExpiresAt: exp, Now: s.now()})
}

// authHost checks a heartbeat's bearer token: signature and claims, then that
// the host is active and the token's generation is current (so deactivating
// or re-claiming a host revokes its tokens at once).
func (s *Server) authHost(c *gin.Context) (*store.Host, error) {
	tok, ok := auth.Bearer(c.Request)
	if !ok {
		return nil, shared.Unauthorized("missing bearer token")
	}
	claims, err := s.tokens.Verify(tok)
	if err != nil {
		return nil, shared.Unauthorized("invalid or expired token")
	}
	h, err := s.store.HostGet(c.Request.Context(), claims.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, shared.Unauthorized("invalid or expired token")
	}
	if err != nil {
		return nil, shared.Unavailable(err)
	}
	if h.Status != store.HostActive || h.Generation != claims.Generation {
		return nil, shared.Unauthorized("token revoked")
	}
	return h, nil
}
