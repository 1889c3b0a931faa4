package server

import (
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/shared"
)

// maxAuthClients bounds the clients whose failed authentications are
// remembered: 10,000 buckets are about 1 MiB.
const maxAuthClients = 10_000

// authClient is who failed authentications are counted against: the
// client's IP, or its /64 for IPv6, which one subscriber usually holds
// whole.
func authClient(c *gin.Context) string {
	ip, err := netip.ParseAddr(c.ClientIP())
	if err != nil {
		return c.ClientIP()
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// authAttempt starts an authentication attempt of the client: false when
// the client has failed too often lately, and was answered 429. The attempt
// then ends with failed or succeeded.
func (s *Server) authAttempt(c *gin.Context) (*authAttempt, bool) {
	client := authClient(c)
	refund, wait := s.authLimits.Take(client, s.clock.Now())
	if refund == nil {
		s.logAuthFailure(c, client, "too many failed attempts: answered 429")
		c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
		s.writeError(c, &shared.Error{Code: shared.CodeRateLimited,
			Message: "too many failed attempts from this address: retry after the time in Retry-After"})
		return nil, false
	}
	return &authAttempt{s: s, c: c, client: client, refund: refund}, true
}

type authAttempt struct {
	s      *Server
	c      *gin.Context
	client string
	refund func()
}

// failed logs the failure (sampled); the token stays taken.
func (a *authAttempt) failed(reason string) { a.s.logAuthFailure(a.c, a.client, reason) }

// succeeded gives the attempt's token back.
func (a *authAttempt) succeeded() { a.refund() }

// logAuthFailure logs a failed authentication, at most authLogPerMin lines a
// minute in all; the line says how many failures went unlogged before it.
func (s *Server) logAuthFailure(c *gin.Context, client, reason string) {
	ok, unlogged := s.authLog.Take("", s.clock.Now())
	if !ok {
		return
	}
	s.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "authentication failed",
		slog.String("route", c.FullPath()), slog.String("client", client),
		slog.String("reason", reason), slog.Int("unlogged_before", unlogged))
}

// CheckAdminLogin checks a presented admin token — the admin API's bearer
// token, the console's login — in constant time, under the per-client
// throttle of failed attempts (authAttempt's). nil: it is the admin token;
// else an error of code unauthorized, rate_limited (retry after wait) or
// not_implemented (no admin token configured); see Describe.
func (s *Server) CheckAdminLogin(c *gin.Context, token string) (wait time.Duration, err error) {
	if s.cfg.AdminToken == "" {
		return 0, &shared.Error{Code: shared.CodeNotImplemented, Message: "logging in is disabled: set RELAY_ADMIN_TOKEN"}
	}
	client := authClient(c)
	refund, wait := s.authLimits.Take(client, s.clock.Now())
	if refund == nil {
		s.logAuthFailure(c, client, "too many failed attempts: refused")
		return wait, &shared.Error{Code: shared.CodeRateLimited, Message: "too many failed attempts from this address: try again later"}
	}
	if !auth.BearerEqual(token, s.cfg.AdminToken) {
		s.logAuthFailure(c, client, "wrong admin token")
		return 0, shared.Unauthorized("wrong admin token")
	}
	refund()
	return 0, nil
}

// authLogPerMin bounds the failed-authentication log lines.
const authLogPerMin = 10
