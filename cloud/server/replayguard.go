package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// ReplayWindow is how far back the replay guard looks for a delivery with
// the same body: providers resend an event under its own id, so the same
// body under a new id within a day is, in practice, a replay.
const ReplayWindow = 24 * time.Hour

// errReplayNotHeld answers a suspected replay the quarantine had no room
// for: 503, as for a quarantine that is full; holdReplay logs it, sampled.
var errReplayNotHeld = &apiError{code: shared.CodeUnavailable, message: "storage unavailable, retry later", quiet: true}

// holdReplay keeps a verified webhook of a replay-guarded source whose body
// is that of earlier, stored under another event id: held in the
// quarantine (kind replay) with its body and headers, the earlier delivery
// named in its reason and in the rejections audit, counted as replay_held —
// and answered as a stored webhook is, with the delivery id it would have
// had, so that whoever replays it does not learn it was caught. Only an
// operator releases it (releaseHeld). The headers that carry the source's
// secret itself (token schemes) are not kept: the request was verified, and
// a release does not verify it again.
func (s *Server) holdReplay(ctx context.Context, t *target, req *verify.Request, ev verify.Event, id string,
	earlier *store.DigestMatch, received time.Time, clientIP string) (*admitted, error) {
	src, provider := t.src, t.provider
	reason := fmt.Sprintf("suspected replay: the body of delivery %s (event %s, received %s) under the new event id %s",
		earlier.DeliveryID, earlier.EventID, earlier.ReceivedAt.UTC().Format(time.RFC3339), ev.ID)
	header, _ := withoutTokens(req.Header, verify.SecretHeaders(provider, src.Options), nil)
	logIt := s.quarantineLog.allowOne(src.HostID, received)
	q, err := s.store.QuarantineInsert(ctx, &store.QuarantineInsertParams{
		QuarantinedRequest: store.QuarantinedRequest{
			HostID: src.HostID, Source: src.Name, URL: req.URL, Header: header, Body: req.Body,
			ClientIP: clientIP, ReceivedAt: received, Kind: store.QuarantineReplay, Reason: truncate(reason, 500),
		},
		MaxRows:      s.cfg.QuarantineMax,
		MaxBytes:     s.cfg.QuarantineMaxBytes,
		HostMaxRows:  s.cfg.QuarantineHostMax,
		HostMaxBytes: s.cfg.QuarantineHostMaxBytes,
	})
	status := provider.SuccessStatus()
	switch {
	case errors.Is(err, store.ErrQuarantineFull):
		// Never dropped while answered 2xx: refused, audited and counted.
		s.metrics.count(provider.Name(), outcomeQuarantineFull)
		s.audit(ctx, src, 503, reason+"; not held: "+err.Error(), clientIP, req.Header, received)
		if logIt {
			s.log.Error("suspected replay not held: the quarantine is full", "host", src.HostID, "source", src.Name,
				"earlier_delivery_id", earlier.DeliveryID, "err", err)
		}
		return nil, errReplayNotHeld
	case err != nil:
		return nil, err
	}
	s.audit(ctx, src, status, reason+"; held as quarantine request "+strconv.FormatInt(q.ID, 10), clientIP, req.Header, received)
	if logIt {
		s.log.Warn("suspected replay held: a body already delivered, under a new event id", "host", src.HostID,
			"source", src.Name, "event_id", ev.ID, "earlier_delivery_id", earlier.DeliveryID, "quarantine_id", q.ID)
	}
	return s.answer(provider, req, &admitted{outcome: outcomeReplayHeld, status: status,
		resp: shared.IntakeResponse{DeliveryID: id, Status: shared.IntakeQueued}}), nil
}

// audit records a refused or held request in the rejections audit, sampled
// per host (so a flood cannot fill the database), and says whether this one
// was recorded (or tried: a failure is logged).
func (s *Server) audit(ctx context.Context, src *store.Source, status int, reason, clientIP string, h http.Header, at time.Time) bool {
	if !s.auditSample.allowOne(src.HostID, at) {
		return false
	}
	err := s.store.RejectionInsert(ctx, &store.Rejection{
		HostID: src.HostID, Source: src.Name, At: at, Status: status, Reason: truncate(reason, 500),
		ClientIP: clientIP, HeaderNames: headerNames(h),
	})
	if err != nil {
		s.log.Warn("rejection not recorded", "host", src.HostID, "source", src.Name, "err", err)
	}
	return true
}

// releaseHeld answers POST /api/quarantine/:id/release: a held suspected
// replay is admitted past the replay guard — a new delivery, its receipt
// audited as released by an operator — and leaves the quarantine. Requests
// waiting for a key are released by the passes (POST
// /api/quarantine/release), never one by one: 409.
func (s *Server) releaseHeld(c *gin.Context) {
	ctx := c.Request.Context()
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		s.writeError(c, errInvalid("id: a quarantined request's id"))
		return
	}
	q, err := s.store.QuarantineGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(c, errNotFound("no such quarantined request"))
		return
	}
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	if q.Kind != store.QuarantineReplay {
		s.writeError(c, &apiError{code: shared.CodeConflict,
			message: "this request waits for a key that decrypts its source's secret: the release passes take it (POST /api/quarantine/release)"})
		return
	}
	t, err := s.resolveTarget(ctx, q.HostID, q.Source)
	if isUnavailable(err) {
		s.writeError(c, err)
		return
	}
	if err != nil {
		// Its host or source is gone: nothing to deliver it to.
		if derr := s.store.QuarantineDelete(ctx, id); derr != nil {
			s.writeError(c, errUnavailable(derr))
			return
		}
		s.log.Warn("held request dropped on release", "host", q.HostID, "source", q.Source, "reason", err.Error())
		s.writeError(c, errNotFound("its host or source is gone: the held request was dropped"))
		return
	}
	header := http.Header(q.Header)
	if header == nil {
		header = http.Header{}
	}
	req := &verify.Request{Header: header, Body: q.Body, Now: q.ReceivedAt, URL: q.URL}
	res, err := s.admit(ctx, t, req, "released by an operator, held as a "+q.Reason, q.ReceivedAt,
		admitFrom{guard: false, clientIP: q.ClientIP})
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	// Admitted before it leaves: released twice, the second is a duplicate.
	if err := s.store.QuarantineDelete(ctx, id); err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	s.log.Info("held request released by an operator", "host", q.HostID, "source", q.Source,
		"quarantine_id", id, "delivery_id", res.resp.DeliveryID, "status", res.resp.Status)
	c.JSON(200, res.resp)
}
