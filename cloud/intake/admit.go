package intake

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
	"github.com/relaykit/relay/shared/telemetry"
)

// Admitted is what a verified request came to: Reply, a handshake
// answered in place or the provider's own shape of acknowledgement where
// it reads one (a Discord deferred response, TwiML); else Status and
// Response, the relay's JSON.
type Admitted struct {
	Outcome  string // an Outcome*
	Reply    *verify.Reply
	Status   int
	Response shared.IntakeResponse
	// Event is the event the filter refused (OutcomeFiltered).
	Event verify.Event
}

// From says where a request being admitted comes from.
type From struct {
	// Guard: the source's replay guard applies (see holdReplay). Off only
	// for a suspected replay an operator releases.
	Guard    bool
	ClientIP string
}

// Admit takes a verified request the rest of the way: handshakes answered in
// place, the event filter, the replay guard, then dedupe and the durable
// insert. Errors are storage failures, or ErrReplayNotHeld for a suspected
// replay the quarantine had no room for. Intake and the quarantine
// releases share it.
func (s *Service) Admit(ctx context.Context, t *Target, req *verify.Request, note string, received time.Time, from From) (*Admitted, error) {
	host, src, provider := t.Host, t.Source, t.Provider
	if hs, ok := provider.(verify.Handshaker); ok {
		if reply, ok := hs.Handshake(req); ok {
			s.metrics.Count(provider.Name(), OutcomeHandshake)
			return &Admitted{Outcome: OutcomeHandshake, Reply: reply}, nil
		}
	}
	ev := verify.EventOf(provider, req, src.Options)
	if ev.Note != "" {
		note = strings.TrimPrefix(note+"; "+shared.Truncate(ev.Note, 200), "; ")
	}
	// Only the operator's event filter drops a webhook here. The host's own
	// configuration (its sources and their events, reported as its
	// subscription) never does: a webhook the host does not handle is
	// stored and handed to it like any other, and the host records it as
	// skipped, with why, in its ledger and in the cloud — kept for the
	// retention window and replayable. A typo in a host's source name must
	// not make the cloud throw webhooks away while answering 200.
	if !shared.EventWanted(src.Events, ev.Type, ev.Action) {
		return s.answer(provider, req, &Admitted{Outcome: OutcomeFiltered, Status: provider.SuccessStatus(),
			Response: shared.IntakeResponse{Status: shared.IntakeFiltered}, Event: ev}), nil
	}

	id := store.DeliveryID(src.Name, ev.ID, received)
	var digest []byte
	if verify.ReplayGuarded(provider, src.Options) {
		sum := sha256.Sum256(req.Body)
		digest = sum[:]
		if from.Guard {
			lookup := &store.DigestLookupParams{HostID: host.ID, Source: src.Name, Digest: digest,
				Since: received.Add(-ReplayWindow), EventID: ev.ID}
			if t.Group != nil {
				lookup.GroupID = t.Group.ID
			}
			earlier, err := s.store.DeliveryByDigest(ctx, lookup)
			switch {
			case err == nil && earlier.EventID != ev.ID:
				return s.holdReplay(ctx, t, req, ev, id, earlier, received, from.ClientIP)
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
	headers := providerHeaders(req.Header, t.Forward, verify.SecretHeaders(provider, src.Options))
	headers[shared.HeaderTraceParent] = traceparent
	if t.Group != nil {
		headers[groupHeader] = t.Group.ID
	}
	steptime.Stamp(headers, "verified", steptime.Now())
	correlationID := NewCorrelationID(received)
	sctx, storeSpan := s.cfg.Tracer.StartChild(ctx, "store")
	p := &store.DeliveryInsertParams{
		ID:            id,
		HostID:        host.ID,
		Source:        src.Name,
		EventID:       ev.ID,
		EventType:     shared.Truncate(ev.Type, 200),
		EventAction:   shared.Truncate(ev.Action, 200),
		Headers:       headers,
		RawBody:       req.Body,
		RetryDelays:   src.RetryDelays, // nil: the store's default schedule
		MaxAttempts:   src.MaxAttempts,
		CorrelationID: correlationID,
		ReceiveNote:   note,
		ReceivedAt:    received,
		BodyDigest:    digest,
	}
	var res *store.DeliveryInsertResult
	var err error
	if t.Group != nil && src.Mode == store.GroupFanout {
		res, err = s.insertFanout(sctx, t.Group, p)
	} else {
		candidates := []string{host.ID}
		if t.Group != nil {
			// An any source: one delivery, held by a member the group
			// router picks.
			p.GroupID, candidates = t.Group.ID, s.pick(t.Group)
			if len(candidates) == 0 {
				telemetry.End(storeSpan, ErrNoMembers)
				telemetry.End(span, ErrNoMembers)
				return nil, ErrNoMembers
			}
		}
		res, err = s.insert(sctx, p, len(req.Body), candidates)
	}
	telemetry.End(storeSpan, err)
	if err != nil {
		telemetry.End(span, err)
		return nil, err
	}
	out := &Admitted{Outcome: OutcomeQueued, Status: provider.SuccessStatus(),
		Response: shared.IntakeResponse{DeliveryID: res.Delivery.ID, Status: shared.IntakeQueued}}
	switch res.Outcome {
	case store.InsertDuplicate:
		out.Outcome, out.Response.Status = OutcomeDuplicate, shared.IntakeDuplicate
	case store.InsertRevived:
		out.Outcome = OutcomeRevived
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

// pick lists the members of g that may hold a new delivery of an any
// source, first choice first: the group router's, or the first active
// member without one.
func (s *Service) pick(g *store.Group) []string {
	members := g.ActiveMemberIDs()
	if s.cfg.Groups != nil {
		return s.cfg.Groups.Pick(g.ID, members)
	}
	return members[:min(len(members), 1)]
}

// insert stores p for the first of candidates (a host, or the members of
// a group that may hold it, first choice first) whose socket on this
// replica has room and waits with nothing to push, or whose long poll
// here waits having found nothing: it is stored leased to that one, which
// pushes it (or answers with it) once committed, with no lease of its
// own. With none, it is stored pending for the first candidate. A group's
// delivery names its holder in its trail: this one, then each it is
// handed to.
func (s *Service) insert(ctx context.Context, p *store.DeliveryInsertParams, size int, candidates []string) (*store.DeliveryInsertResult, error) {
	p.HostID = candidates[0]
	var reserved *delivery.Reservation
	for _, c := range candidates {
		if reserved = s.cfg.Leaser.Reserve(c, size); reserved != nil {
			p.HostID = c
			break
		}
	}
	if p.GroupID != "" {
		p.ReceiveNote = strings.TrimPrefix(p.ReceiveNote+"; held by "+p.HostID, "; ")
	}
	if reserved != nil {
		p.Lease = reserved.Lease()
		// The outcome decides whether it is handed over or the room is
		// given back: waited for even when the provider hangs up (the
		// group commit bounds the wait).
		ctx = context.WithoutCancel(ctx)
	}
	res, err := s.store.DeliveryInsert(ctx, p)
	if err == nil && reserved != nil {
		steptime.Stamp(res.Delivery.Headers, "stored", steptime.Now())
	}
	if !reserved.Settle(res, err) && err == nil && res.Outcome != store.InsertDuplicate {
		// Stored pending: nothing stored after it may be leased at
		// intake before it is leased.
		s.cfg.Leaser.Pending(p.HostID)
	}
	return res, err
}

// insertFanout stores p as a delivery for every active member of g (its
// members as intake read them: a member added later gets only later
// webhooks; a deactivated host nothing),
// each its own — lease, attempts, schedule, dead letter, audit trail —
// with one copy of the body, all in one transaction. The answer is the
// first member's; the webhook is a duplicate only when every member's
// delivery was one.
func (s *Service) insertFanout(ctx context.Context, g *store.Group, base *store.DeliveryInsertParams) (*store.DeliveryInsertResult, error) {
	members := g.ActiveMemberIDs()
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	share := &store.BodyShare{}
	ps := make([]*store.DeliveryInsertParams, len(members))
	for i, m := range members {
		p := *base
		p.HostID, p.GroupID, p.Lane, p.Share = m, g.ID, m, share
		p.ID = store.LaneDeliveryID(p.Source, p.EventID, m, p.ReceivedAt)
		ps[i] = &p
	}
	results, err := s.store.DeliveryInsertBatch(ctx, ps)
	if err != nil {
		return nil, err
	}
	out := *results[0]
	for _, r := range results {
		if r.Outcome != store.InsertDuplicate {
			s.cfg.Leaser.Pending(r.Delivery.HostID)
		}
		switch {
		case r.Outcome == store.InsertRevived:
			out.Outcome = store.InsertRevived
		case r.Outcome == store.InsertQueued && out.Outcome == store.InsertDuplicate:
			out.Outcome = store.InsertQueued
		}
	}
	return &out, nil
}

// groupHeader is shared.HeaderGroup as a webhook's headers hold it.
var groupHeader = strings.ToLower(shared.HeaderGroup)

// answer counts an admitted request's outcome and gives it the provider's
// own shape of acknowledgement where it reads one.
func (s *Service) answer(provider verify.Provider, req *verify.Request, out *Admitted) *Admitted {
	s.metrics.Count(provider.Name(), out.Outcome)
	if ack, ok := provider.(verify.Acknowledger); ok {
		if reply, ok := ack.Ack(req); ok {
			out.Reply = reply
		}
	}
	return out
}

// dropHeaders are not the provider's: hop-by-hop headers (and Expect, which
// is for this hop too) and those added by proxies on the way in.
var dropHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-authenticate": true, "proxy-authorization": true,
	"proxy-connection": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "content-length": true, "forwarded": true, "x-forwarded-for": true,
	"x-forwarded-host": true, "x-forwarded-proto": true, "x-forwarded-port": true, "x-real-ip": true,
	"expect": true,
	// The relay's own: a sender cannot make a webhook pass for a replay,
	// or for a group's.
	strings.ToLower(shared.HeaderReplayOf): true,
	strings.ToLower(shared.HeaderGroup):    true,
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

// HeaderNames lists a request's header names, lower-case and sorted: what
// the rejections audit keeps of headers (values may carry secrets). The
// store keeps the first of them only (store.Rejection.Bounded).
func HeaderNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, strings.ToLower(k))
	}
	sort.Strings(names)
	return names
}

// NewCorrelationID is the correlation id of a delivery received at: the
// time in unix milliseconds (48 bits) then 64 random bits, in 28 hex
// digits. Ids sort by the time they were made, so their index grows at
// one end, as the received-time index does: with 64 random bits alone,
// each insert wrote the index at a random page (one more page written
// per webhook, in the WAL and again at the checkpoint), and read it first
// once the index outgrew the cache.
func NewCorrelationID(at time.Time) string {
	var b [14]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}
