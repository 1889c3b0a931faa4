package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/limits"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// errBadSignature is the one answer for every verification failure.
var errBadSignature = &shared.Error{Code: shared.CodeUnauthorized, Message: "signature verification failed"}

var errRateLimited = &shared.Error{Code: shared.CodeRateLimited, Message: "over this host's rate limit, retry later"}

// receive takes POST /api/webhooks/:hostId/:source, in DESIGN.md's order:
// host exists and is active, source configured and enabled, the client
// address within the source's allowlist, body within the
// limit, per-host rate limit, the body's share of the bytes in flight
// (limits.BodyBudget), signature, handshakes, event filter, dedupe
// and durable insert — and only then 2xx.
//
// Unknown hosts answer 404 and bad signatures 401 (as the contract says):
// host ids carry 120 random bits, so telling the two apart does not help
// anyone find a host, and a provider's operator sees which one is wrong.
func (s *Server) receive(c *gin.Context) {
	ctx := c.Request.Context()
	hostID, name := c.Param("hostId"), c.Param("source")
	now := s.now()
	t, err := s.intake.Target(ctx, hostID, name)
	if err != nil {
		if isUnavailable(err) {
			s.metrics.Count("", intake.OutcomeUnavailable)
		}
		s.writeError(c, err)
		return
	}
	host, src, provider := t.Host, t.Source, t.Provider

	if ok, ip := clientAllowed(c, t.Allow); !ok {
		// Refused unread, before it costs a token or a byte of the budget.
		s.notAllowed(c, t, ip)
		return
	}

	limit := bodyLimit(src, provider)
	if c.Request.ContentLength > limit {
		// Refused unread.
		c.Header("Connection", "close")
		s.tooLarge(c, src, provider, limit)
		return
	}

	perMin, burst := s.HostRate(host)
	allowed, wait := s.limits.Allow(hostID, perMin, burst, now)
	if !allowed && provider.Retries() {
		// The provider will send it again: not even its body is read.
		s.rateLimited(c, src, provider, wait, fmt.Sprintf("over the host's rate limit of %d/min", perMin))
		return
	}

	lease := s.bodies.Lease(hostID, c.ClientIP())
	defer lease.Release()
	body, err := readLimited(c, limit, lease)
	if errors.Is(err, errBodyTooLarge) {
		s.tooLarge(c, src, provider, limit)
		return
	}
	if obe := (*limits.OverBudgetError)(nil); errors.As(err, &obe) {
		s.overBudget(c, src, provider, obe)
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}

	req := &verify.Request{Header: c.Request.Header, Body: body, Now: now, URL: s.publicURL(c) + c.Request.URL.RequestURI()}
	if t.KeysErr != nil {
		c.Header("Retry-After", "60")
		s.writeError(c, s.intake.Quarantine(ctx, t, req, c.ClientIP()))
		return
	}
	if err := provider.Verify(req, t.Keys, src.Options); err != nil {
		if !allowed {
			// A provider that never retries: only a verified request is
			// worth keeping past the limit.
			s.rateLimited(c, src, provider, wait, fmt.Sprintf("over the host's rate limit of %d/min and not verified: %v", perMin, err))
			return
		}
		s.reject(c, src, provider, 401, "signature: "+err.Error(), intake.OutcomeBadSignature)
		s.writeError(c, errBadSignature)
		return
	}

	note := ""
	if !allowed {
		note = fmt.Sprintf("over the host's rate limit of %d/min, stored because %s does not retry", perMin, provider.Name())
		if s.logSample.Allow(hostID, now) {
			s.log.Warn("webhook over the host's rate limit stored anyway: the provider does not retry",
				"host", hostID, "source", name, "provider", provider.Name(), "rate_limit_per_min", perMin)
		}
	}
	res, err := s.intake.Admit(ctx, t, req, note, now, intake.From{Guard: true, ClientIP: c.ClientIP()})
	if err != nil {
		if errors.Is(err, intake.ErrReplayNotHeld) {
			// A suspected replay with no room to be held: counted and audited.
			s.writeError(c, err)
			return
		}
		if errors.Is(err, intake.ErrNoMembers) {
			// Nothing can hold it: not stored, the provider sends it
			// again later, and the rejection says why.
			s.reject(c, src, provider, 503, err.Error(), intake.OutcomeNoMembers)
			s.writeError(c, err)
			return
		}
		s.metrics.Count(provider.Name(), intake.OutcomeUnavailable)
		s.writeError(c, shared.Unavailable(err))
		return
	}
	if !allowed && res.Outcome != intake.OutcomeHandshake && res.Outcome != intake.OutcomeFiltered && res.Outcome != intake.OutcomeReplayHeld {
		s.metrics.Count(provider.Name(), intake.OutcomeOverLimitStored)
	}
	if res.Outcome == intake.OutcomeFiltered {
		if dead := shared.DeadEntries(src.Events); len(dead) > 0 && s.logSample.Allow(hostID, now) {
			// The operator's filter dropped it, but through an entry that
			// matches nothing, which an older cloud stored: most likely
			// not what the filter was meant to drop.
			s.log.Warn("webhook filtered out by a source whose event filter has entries that match no webhook (stored by an older cloud); replace them, e.g. the type alone for every action",
				"host", hostID, "source", name, "event_type", res.Event.Type, "event_action", res.Event.Action, "entries", dead)
		}
	}
	writeAdmitted(c, res)
}

// writeAdmitted answers the provider: a handshake reply, or the provider's
// own shape of acknowledgement where it reads one (a Discord deferred
// response, TwiML), else the relay's JSON.
func writeAdmitted(c *gin.Context, a *intake.Admitted) {
	if a.Reply != nil {
		c.Data(a.Reply.Status, a.Reply.ContentType, a.Reply.Body)
		return
	}
	c.JSON(a.Status, a.Response)
}

// bodyLimit is the source's own body limit, else its provider's.
func bodyLimit(src *store.Source, provider verify.Provider) int64 {
	if src.MaxBodyBytes > 0 {
		return src.MaxBodyBytes
	}
	return provider.MaxBody()
}

// rateLimited answers 429 with Retry-After, and audits it.
func (s *Server) rateLimited(c *gin.Context, src *store.Source, provider verify.Provider, wait time.Duration, reason string) {
	c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
	s.reject(c, src, provider, 429, reason, intake.OutcomeRateLimited)
	s.writeError(c, errRateLimited)
}

var errOverBudget = &shared.Error{Code: shared.CodeUnavailable, Message: "too many request bodies in flight, retry later"}

// overBudgetRetryAfter is the Retry-After of a request refused for the
// body budget: a flood's requests end within seconds.
const overBudgetRetryAfter = 5 * time.Second

// overBudget answers 503 with Retry-After for a body that did not get its
// share of the in-flight budget in time, and audits it. The connection is
// closed rather than its unread body drained.
func (s *Server) overBudget(c *gin.Context, src *store.Source, provider verify.Provider, err *limits.OverBudgetError) {
	c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(overBudgetRetryAfter)))
	c.Header("Connection", "close")
	s.reject(c, src, provider, 503, err.Error(), intake.OutcomeOverBudget)
	s.writeError(c, errOverBudget)
}

// tooLarge answers 413 for a body over the source's limit, and audits it.
func (s *Server) tooLarge(c *gin.Context, src *store.Source, provider verify.Provider, limit int64) {
	msg := fmt.Sprintf("body over this source's limit of %d bytes", limit)
	s.reject(c, src, provider, 413, msg, intake.OutcomeTooLarge)
	s.writeError(c, &shared.Error{Code: shared.CodeTooLarge, Message: msg})
}

// HostRate is the rate limit intake applies to a host: its own settings,
// else the server's, each on its own.
func (s *Server) HostRate(h *store.Host) (perMin, burst int) {
	perMin = h.RateLimitPerMin
	if perMin <= 0 {
		perMin = s.cfg.RateLimitPerMin
	}
	burst = h.RateLimitBurst
	if burst <= 0 {
		burst = s.cfg.RateLimitBurst
	}
	return perMin, burst
}

// reject records a refused request in the rejections audit (sampled per
// host, so a flood cannot fill the database) and counts it. The caller
// writes the answer.
func (s *Server) reject(c *gin.Context, src *store.Source, provider verify.Provider, status int, reason, outcome string) {
	s.metrics.Count(provider.Name(), outcome)
	if !s.intake.Audit(c.Request.Context(), src, status, reason, c.ClientIP(), c.Request.Header, s.now()) {
		return
	}
	s.log.Info("webhook rejected", "host", src.HostID, "source", src.Name, "status", status,
		"reason", shared.Truncate(reason, store.RejectionMaxReasonBytes), "remote", c.ClientIP())
}

var errBodyTooLarge = errors.New("body over the limit")

// bodyChunk is the least a body of unknown length reserves at a time.
const bodyChunk = 32 << 10

// readLimited reads the raw body, never past the limit, each byte reserved
// in lease before it is read: a declared length (within the limit, checked
// before) at once and into a buffer of that size; a streamed body as its
// buffer grows, cut at limit+1.
func readLimited(c *gin.Context, limit int64, lease *limits.BodyLease) ([]byte, error) {
	ctx := c.Request.Context()
	if n := c.Request.ContentLength; n >= 0 {
		if err := lease.Grow(ctx, n); err != nil {
			return nil, budgetErr(err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.Request.Body, body); err != nil {
			return nil, shared.Invalid("could not read body: " + err.Error())
		}
		return body, nil
	}
	r := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	var body []byte
	for {
		if len(body) == cap(body) {
			grown := min(max(2*int64(cap(body)), bodyChunk), limit+1)
			if err := lease.Grow(ctx, grown-int64(cap(body))); err != nil {
				return nil, budgetErr(err)
			}
			body = append(make([]byte, 0, grown), body...)
		}
		n, err := r.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return body, nil
		case errors.As(err, &mbe):
			return nil, errBodyTooLarge
		case err != nil:
			return nil, shared.Invalid("could not read body: " + err.Error())
		}
	}
}

// budgetErr passes an overBudgetError on; a request that ended while it
// waited for its bytes has nothing left to read.
func budgetErr(err error) error {
	var obe *limits.OverBudgetError
	if errors.As(err, &obe) {
		return err
	}
	return shared.Invalid("could not read body: " + err.Error())
}
