package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
	"github.com/relaykit/relay/shared/telemetry"
)

// errBadSignature is the one answer for every verification failure.
var errBadSignature = &apiError{code: shared.CodeUnauthorized, message: "signature verification failed"}

var errRateLimited = &apiError{code: shared.CodeRateLimited, message: "over this host's rate limit, retry later"}

// intake takes POST /api/webhooks/:hostId/:source, in DESIGN.md's order:
// host exists and is active, source configured and enabled, the client
// address within the source's allowlist, body within the
// limit, per-host rate limit, the body's share of the bytes in flight
// (bodyBudget), signature, handshakes, event filter, dedupe
// and durable insert — and only then 2xx.
//
// Unknown hosts answer 404 and bad signatures 401 (as the contract says):
// host ids carry 120 random bits, so telling the two apart does not help
// anyone find a host, and a provider's operator sees which one is wrong.
func (s *Server) intake(c *gin.Context) {
	ctx := c.Request.Context()
	hostID, name := c.Param("hostId"), c.Param("source")
	if err := checkTargetNames(hostID, name); err != nil {
		// Made up: answered at once, neither looked up nor cached.
		s.writeError(c, err)
		return
	}

	now := s.now()
	t, err := s.targets.get(hostID, name, now, func() (*target, error) { return s.resolveTarget(ctx, hostID, name) })
	if err != nil {
		if isUnavailable(err) {
			s.metrics.count("", outcomeUnavailable)
		}
		s.writeError(c, err)
		return
	}
	host, src, provider := t.host, t.src, t.provider

	if ok, ip := clientAllowed(c, t.allow); !ok {
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
	allowed, wait := s.limits.allow(hostID, perMin, burst, now)
	if !allowed && provider.Retries() {
		// The provider will send it again: not even its body is read.
		s.rateLimited(c, src, provider, wait, fmt.Sprintf("over the host's rate limit of %d/min", perMin))
		return
	}

	lease := s.bodies.lease(hostID, c.ClientIP())
	defer lease.release()
	body, err := readLimited(c, limit, lease)
	if errors.Is(err, errBodyTooLarge) {
		s.tooLarge(c, src, provider, limit)
		return
	}
	if obe := (*overBudgetError)(nil); errors.As(err, &obe) {
		s.overBudget(c, src, provider, obe)
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}

	req := &verify.Request{Header: c.Request.Header, Body: body, Now: now, URL: s.publicURL(c) + c.Request.URL.RequestURI()}
	if t.keysErr != nil {
		s.quarantine(c, src, provider, req, t.keysErr)
		return
	}
	if err := provider.Verify(req, t.keys, src.Options); err != nil {
		if !allowed {
			// A provider that never retries: only a verified request is
			// worth keeping past the limit.
			s.rateLimited(c, src, provider, wait, fmt.Sprintf("over the host's rate limit of %d/min and not verified: %v", perMin, err))
			return
		}
		s.reject(c, src, provider, 401, "signature: "+err.Error(), outcomeBadSignature)
		s.writeError(c, errBadSignature)
		return
	}

	note := ""
	if !allowed {
		note = fmt.Sprintf("over the host's rate limit of %d/min, stored because %s does not retry", perMin, provider.Name())
		if s.logSample.allowOne(hostID, now) {
			s.log.Warn("webhook over the host's rate limit stored anyway: the provider does not retry",
				"host", hostID, "source", name, "provider", provider.Name(), "rate_limit_per_min", perMin)
		}
	}
	res, err := s.admit(ctx, t, req, note, now, admitFrom{guard: true, clientIP: c.ClientIP()})
	if err != nil {
		if errors.Is(err, errReplayNotHeld) {
			// A suspected replay with no room to be held: counted and audited.
			s.writeError(c, errReplayNotHeld)
			return
		}
		s.metrics.count(provider.Name(), outcomeUnavailable)
		s.writeError(c, errUnavailable(err))
		return
	}
	if !allowed && res.outcome != outcomeHandshake && res.outcome != outcomeFiltered && res.outcome != outcomeReplayHeld {
		s.metrics.count(provider.Name(), outcomeOverLimitStored)
	}
	res.write(c)
}

// intakeLeaser holds room on a host's live socket on this replica, else on
// its long poll waiting here, for one webhook about to be stored
// (delivery.Intake).
type intakeLeaser interface {
	Reserve(hostID string, size int) *delivery.Reservation
	// Pending: a delivery of the host was stored pending, not leased.
	Pending(hostID string)
}

// admitted is what a verified request came to.
type admitted struct {
	outcome string
	reply   *verify.Reply // a handshake answered in place
	status  int
	resp    shared.IntakeResponse
}

// write answers the provider: a handshake reply, or the provider's own shape
// of acknowledgement where it reads one (a Discord deferred response, TwiML),
// else the relay's JSON.
func (a *admitted) write(c *gin.Context) {
	if a.reply != nil {
		c.Data(a.reply.Status, a.reply.ContentType, a.reply.Body)
		return
	}
	c.JSON(a.status, a.resp)
}

// admitFrom says where a request being admitted comes from.
type admitFrom struct {
	// guard: the source's replay guard applies (see holdReplay). Off only
	// for a suspected replay an operator releases.
	guard    bool
	clientIP string
}

// admit takes a verified request the rest of the way: handshakes answered in
// place, the event filter, the replay guard, then dedupe and the durable
// insert. Errors are storage failures, or errReplayNotHeld for a suspected
// replay the quarantine had no room for. Intake and the quarantine
// releases share it.
func (s *Server) admit(ctx context.Context, t *target, req *verify.Request, note string, received time.Time, from admitFrom) (*admitted, error) {
	host, src, provider := t.host, t.src, t.provider
	if hs, ok := provider.(verify.Handshaker); ok {
		if reply, ok := hs.Handshake(req); ok {
			s.metrics.count(provider.Name(), outcomeHandshake)
			return &admitted{outcome: outcomeHandshake, reply: reply}, nil
		}
	}
	ev := verify.EventOf(provider, req, src.Options)
	if ev.Note != "" {
		note = strings.TrimPrefix(note+"; "+truncate(ev.Note, 200), "; ")
	}
	// Only the operator's event filter drops a webhook here. The host's own
	// configuration (its sources and their events, reported as its
	// subscription) never does: a webhook the host does not handle is
	// stored and handed to it like any other, and the host records it as
	// skipped, with why, in its ledger and in the cloud — kept for the
	// retention window and replayable. A typo in a host's source name must
	// not make the cloud throw webhooks away while answering 200.
	if !shared.EventWanted(src.Events, ev.Type, ev.Action) {
		return s.answer(provider, req, &admitted{outcome: outcomeFiltered, status: provider.SuccessStatus(),
			resp: shared.IntakeResponse{Status: shared.IntakeFiltered}}), nil
	}

	id := store.DeliveryID(src.Name, ev.ID, received)
	var digest []byte
	if verify.ReplayGuarded(provider, src.Options) {
		sum := sha256.Sum256(req.Body)
		digest = sum[:]
		if from.guard {
			earlier, err := s.store.DeliveryByDigest(ctx, &store.DigestLookupParams{
				HostID: host.ID, Source: src.Name, Digest: digest, Since: received.Add(-ReplayWindow), EventID: ev.ID})
			switch {
			case err == nil && earlier.EventID != ev.ID:
				return s.holdReplay(ctx, t, req, ev, id, earlier, received, from.clientIP)
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			}
		}
	}

	// The webhook's trace starts here, or continues the provider's; its
	// traceparent is stored among the delivery's headers and goes on to
	// the handler.
	ctx, span, traceparent := s.cfg.Tracer.Start(ctx, "intake", req.Header.Get(shared.HeaderTraceParent),
		attribute.String("relay.delivery_id", id), attribute.String("relay.host_id", host.ID), attribute.String("relay.source", src.Name))
	headers := providerHeaders(req.Header, t.forward, verify.SecretHeaders(provider, src.Options))
	headers[shared.HeaderTraceParent] = traceparent
	steptime.Stamp(headers, "verified", steptime.Now())
	correlationID := newCorrelationID()
	sctx, storeSpan := s.cfg.Tracer.StartChild(ctx, "store")
	p := &store.DeliveryInsertParams{
		ID:            id,
		HostID:        host.ID,
		Source:        src.Name,
		EventID:       ev.ID,
		EventType:     truncate(ev.Type, 200),
		EventAction:   truncate(ev.Action, 200),
		Headers:       headers,
		RawBody:       req.Body,
		RetryDelays:   src.RetryDelays, // nil: the store's default schedule
		MaxAttempts:   src.MaxAttempts,
		CorrelationID: correlationID,
		ReceiveNote:   note,
		ReceivedAt:    received,
		BodyDigest:    digest,
	}
	// A host whose socket on this replica has room and waits with nothing
	// to push, or whose long poll here waits having found nothing, gets the
	// webhook stored leased to it, which pushes it (or answers with it) once
	// committed: no lease of its own.
	reserved := s.leaser.Reserve(host.ID, len(req.Body))
	if reserved != nil {
		p.Lease = reserved.Lease()
		// The outcome decides whether it is handed over or the room is
		// given back: waited for even when the provider hangs up (the
		// group commit bounds the wait).
		sctx = context.WithoutCancel(sctx)
	}
	res, err := s.store.DeliveryInsert(sctx, p)
	if err == nil && reserved != nil {
		steptime.Stamp(res.Delivery.Headers, "stored", steptime.Now())
	}
	if !reserved.Settle(res, err) && err == nil && res.Outcome != store.InsertDuplicate {
		// Stored pending: nothing stored after it may be leased at
		// intake before it is leased.
		s.leaser.Pending(host.ID)
	}
	telemetry.End(storeSpan, err)
	if err != nil {
		telemetry.End(span, err)
		return nil, err
	}
	out := &admitted{outcome: outcomeQueued, status: provider.SuccessStatus(),
		resp: shared.IntakeResponse{DeliveryID: res.Delivery.ID, Status: shared.IntakeQueued}}
	switch res.Outcome {
	case store.InsertDuplicate:
		out.outcome, out.resp.Status = outcomeDuplicate, shared.IntakeDuplicate
	case store.InsertRevived:
		out.outcome = outcomeRevived
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		// Built only when it is logged: the trace id is parsed per webhook.
		s.log.LogAttrs(ctx, slog.LevelDebug, "webhook stored", slog.String("delivery_id", res.Delivery.ID),
			slog.String("outcome", string(res.Outcome)), slog.String("correlation_id", res.Delivery.CorrelationID),
			slog.String("trace_id", shared.TraceIDOf(res.Delivery.Headers[shared.HeaderTraceParent])))
	}
	span.End()
	return s.answer(provider, req, out), nil
}

// answer counts an admitted request's outcome and gives it the provider's
// own shape of acknowledgement where it reads one.
func (s *Server) answer(provider verify.Provider, req *verify.Request, out *admitted) *admitted {
	s.metrics.count(provider.Name(), out.outcome)
	if ack, ok := provider.(verify.Acknowledger); ok {
		if reply, ok := ack.Ack(req); ok {
			out.reply = reply
		}
	}
	return out
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
	s.reject(c, src, provider, 429, reason, outcomeRateLimited)
	s.writeError(c, errRateLimited)
}

var errOverBudget = &apiError{code: shared.CodeUnavailable, message: "too many request bodies in flight, retry later"}

// overBudgetRetryAfter is the Retry-After of a request refused for the
// body budget: a flood's requests end within seconds.
const overBudgetRetryAfter = 5 * time.Second

// overBudget answers 503 with Retry-After for a body that did not get its
// share of the in-flight budget in time, and audits it. The connection is
// closed rather than its unread body drained.
func (s *Server) overBudget(c *gin.Context, src *store.Source, provider verify.Provider, err *overBudgetError) {
	c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(overBudgetRetryAfter)))
	c.Header("Connection", "close")
	s.reject(c, src, provider, 503, err.Error(), outcomeOverBudget)
	s.writeError(c, errOverBudget)
}

// tooLarge answers 413 for a body over the source's limit, and audits it.
func (s *Server) tooLarge(c *gin.Context, src *store.Source, provider verify.Provider, limit int64) {
	msg := fmt.Sprintf("body over this source's limit of %d bytes", limit)
	s.reject(c, src, provider, 413, msg, outcomeTooLarge)
	s.writeError(c, &apiError{code: shared.CodeTooLarge, message: msg})
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
	s.metrics.count(provider.Name(), outcome)
	if !s.audit(c.Request.Context(), src, status, reason, c.ClientIP(), c.Request.Header, s.now()) {
		return
	}
	s.log.Info("webhook rejected", "host", src.HostID, "source", src.Name, "status", status,
		"reason", truncate(reason, store.RejectionMaxReasonBytes), "remote", c.ClientIP())
}

var errBodyTooLarge = errors.New("body over the limit")

// bodyChunk is the least a body of unknown length reserves at a time.
const bodyChunk = 32 << 10

// readLimited reads the raw body, never past the limit, each byte reserved
// in lease before it is read: a declared length (within the limit, checked
// before) at once and into a buffer of that size; a streamed body as its
// buffer grows, cut at limit+1.
func readLimited(c *gin.Context, limit int64, lease *bodyLease) ([]byte, error) {
	ctx := c.Request.Context()
	if n := c.Request.ContentLength; n >= 0 {
		if err := lease.grow(ctx, n); err != nil {
			return nil, budgetErr(err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.Request.Body, body); err != nil {
			return nil, errInvalid("could not read body: " + err.Error())
		}
		return body, nil
	}
	r := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	var body []byte
	for {
		if len(body) == cap(body) {
			grown := min(max(2*int64(cap(body)), bodyChunk), limit+1)
			if err := lease.grow(ctx, grown-int64(cap(body))); err != nil {
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
			return nil, errInvalid("could not read body: " + err.Error())
		}
	}
}

// budgetErr passes an overBudgetError on; a request that ended while it
// waited for its bytes has nothing left to read.
func budgetErr(err error) error {
	var obe *overBudgetError
	if errors.As(err, &obe) {
		return err
	}
	return errInvalid("could not read body: " + err.Error())
}

func (s *Server) openSecrets(src *store.Source) ([][]byte, error) {
	keys := make([][]byte, 0, len(src.Secrets))
	for i, sec := range src.Secrets {
		k, err := s.ring.Open(sec.Ciphertext, sealContext(src.HostID, src.Name))
		if err != nil {
			if errors.Is(err, secrets.ErrNoKey) {
				return nil, err
			}
			return nil, fmt.Errorf("secret %s: %w", secretLabel(i, sec), err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// dropHeaders are not the provider's: hop-by-hop headers (and Expect, which
// is for this hop too) and those added by proxies on the way in.
var dropHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-authenticate": true, "proxy-authorization": true,
	"proxy-connection": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "content-length": true, "forwarded": true, "x-forwarded-for": true,
	"x-forwarded-host": true, "x-forwarded-proto": true, "x-forwarded-port": true, "x-real-ip": true,
	"expect": true,
	// The relay's own: a sender cannot make a webhook pass for a replay.
	strings.ToLower(shared.HeaderReplayOf): true,
}

// providerHeaders keeps the provider's headers with their values exactly as
// sent, names lower-cased; repeated headers are joined with ", ". Kept are
// those the source's filter keeps (the provider's documented headers and
// its forward_headers; see verify.ForwardedHeaders), so a sender cannot
// hand the local app headers of its choosing; stored, they are what the
// host forwards and the console and API show. Hop-by-hop headers —
// dropHeaders and those the request's Connection header names — and the
// secret-bearing ones (token schemes) are left out whatever the filter says.
func providerHeaders(h http.Header, keep verify.HeaderFilter, secret []string) map[string]string {
	hop := connectionNamed(h)
	out := make(map[string]string, len(h))
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !keep.Keep(lk) || dropHeaders[lk] || hop[lk] || slices.ContainsFunc(secret, func(s string) bool { return strings.EqualFold(s, k) }) {
			continue
		}
		out[lk] = strings.Join(vs, ", ")
	}
	return out
}

// connectionNamed is the set of header names, lower-case, that the
// request's Connection header lists: hop-by-hop by RFC 9110 7.6.1.
func connectionNamed(h http.Header) map[string]bool {
	var named map[string]bool
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.ToLower(strings.TrimSpace(name)); name != "" {
				if named == nil {
					named = make(map[string]bool)
				}
				named[name] = true
			}
		}
	}
	return named
}

// headerNames lists a request's header names, lower-case and sorted: what
// the rejections audit keeps of headers (values may carry secrets). The
// store keeps the first of them only (store.Rejection.Bounded).
func headerNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, strings.ToLower(k))
	}
	sort.Strings(names)
	return names
}

func newCorrelationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
