package intake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// ReplayWindow is how far back the replay guard looks for a delivery with
// the same body: providers resend an event under its own id, so the same
// body under a new id within a day is, in practice, a replay.
const ReplayWindow = 24 * time.Hour

// holdReplay keeps a verified webhook of a replay-guarded source whose body
// is that of earlier, stored under another event id: held in the
// quarantine (kind replay) with its body and headers, the earlier delivery
// named in its reason and in the rejections audit, counted as replay_held —
// and answered as a stored webhook is, with the delivery id it would have
// had, so that whoever replays it does not learn it was caught. Only an
// operator releases it (ReleaseHeld). The headers that carry the source's
// secret itself (token schemes) are not kept: the request was verified, and
// a release does not verify it again.
func (s *Service) holdReplay(ctx context.Context, t *Target, req *verify.Request, ev verify.Event, id string,
	earlier *store.DigestMatch, received time.Time, clientIP string) (*Admitted, error) {
	src, provider := t.Source, t.Provider
	reason := fmt.Sprintf("suspected replay: the body of delivery %s (event %s, received %s) under the new event id %s",
		earlier.DeliveryID, earlier.EventID, earlier.ReceivedAt.UTC().Format(time.RFC3339), ev.ID)
	header, _ := withoutTokens(req.Header, verify.SecretHeaders(provider, src.Options), nil)
	logIt := s.quarantineLog.Allow(src.HostID, received)
	q, err := s.store.QuarantineInsert(ctx, &store.QuarantineInsertParams{
		QuarantinedRequest: store.QuarantinedRequest{
			HostID: src.HostID, Source: src.Name, URL: req.URL, Header: header, Body: req.Body,
			ClientIP: clientIP, ReceivedAt: received, Kind: store.QuarantineReplay, Reason: shared.Truncate(reason, 500),
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
		s.metrics.Count(provider.Name(), OutcomeQuarantineFull)
		s.Audit(ctx, src, 503, reason+"; not held: "+err.Error(), clientIP, req.Header, received)
		if logIt {
			s.log.Error("suspected replay not held: the quarantine is full", "host", src.HostID, "source", src.Name,
				"earlier_delivery_id", earlier.DeliveryID, "err", err)
		}
		return nil, ErrReplayNotHeld
	case err != nil:
		return nil, err
	}
	s.Audit(ctx, src, status, reason+"; held as quarantine request "+strconv.FormatInt(q.ID, 10), clientIP, req.Header, received)
	if logIt {
		s.log.Warn("suspected replay held: a body already delivered, under a new event id", "host", src.HostID,
			"source", src.Name, "event_id", ev.ID, "earlier_delivery_id", earlier.DeliveryID, "quarantine_id", q.ID)
	}
	return s.answer(provider, req, &Admitted{Outcome: OutcomeReplayHeld, Status: status,
		Response: shared.IntakeResponse{DeliveryID: id, Status: shared.IntakeQueued}}), nil
}

// Audit records a refused or held request in the rejections audit, sampled
// per host (so a flood cannot fill the database), and says whether this one
// was recorded (or tried: a failure is logged).
func (s *Service) Audit(ctx context.Context, src *store.Source, status int, reason, clientIP string, h http.Header, at time.Time) bool {
	if !s.audits.Allow(src.HostID, at) {
		return false
	}
	err := s.store.RejectionInsert(ctx, &store.Rejection{
		HostID: src.HostID, Source: src.Name, At: at, Status: status, Reason: shared.Truncate(reason, 500),
		ClientIP: clientIP, HeaderNames: HeaderNames(h),
	})
	if err != nil {
		s.log.Warn("rejection not recorded", "host", src.HostID, "source", src.Name, "err", err)
	}
	return true
}
