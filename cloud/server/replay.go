package server

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// replayHeader is shared.HeaderReplayOf as stored among a delivery's
// headers (lower-cased, as intake stores the provider's).
var replayHeader = strings.ToLower(shared.HeaderReplayOf)

// ReplayDelivery makes a new delivery of one of a host's stored deliveries,
// whatever its status — its body and the provider's headers as received,
// to the same host or to toHostID — as POST
// /api/hosts/:id/webhooks/:deliveryId/replay does. The new delivery has an
// event id and a delivery id of its own (so the host's ledger runs it
// rather than skipping it as done), the header X-Relay-Replay-Of naming
// the original, the retry schedule of the receiving host's source of that
// name (else the original's), and a trail that starts "received (replay
// of …)"; the original's trail notes the replay. Errors are the API's.
func (s *Server) ReplayDelivery(ctx context.Context, hostID, id, toHostID string) (*store.Delivery, error) {
	orig, err := s.store.DeliveryGet(ctx, hostID, id)
	if err != nil {
		return nil, notFoundAs(err, "no such delivery on this host")
	}
	if toHostID == "" {
		toHostID = hostID
	}
	to, err := s.store.HostGet(ctx, toHostID)
	if err != nil {
		return nil, hostErr(err)
	}
	if to.Status != store.HostActive {
		return nil, &shared.Error{Code: shared.CodeConflict, Message: "host " + to.ID + " is deactivated: a replay would never be handed out"}
	}
	delays, maxAttempts := orig.RetryDelays, 0
	if src, err := s.store.SourceGet(ctx, to.ID, orig.Source); err == nil {
		delays, maxAttempts = src.RetryDelays, src.MaxAttempts
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}

	now := s.now()
	eventID := verify.SafeEventID(orig.EventID + "~replay-" + strconv.FormatInt(now.UnixMilli(), 10))
	newID := store.DeliveryID(orig.Source, eventID, now)
	ctx, span, traceparent := s.cfg.Tracer.Start(ctx, "replay", orig.Headers[shared.HeaderTraceParent],
		attribute.String("relay.delivery_id", newID), attribute.String("relay.replay_of", orig.ID),
		attribute.String("relay.host_id", to.ID), attribute.String("relay.source", orig.Source))
	defer span.End()
	headers := maps.Clone(orig.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	delete(headers, steptime.Header) // the original's own steps
	headers[replayHeader] = orig.ID
	headers[shared.HeaderTraceParent] = traceparent
	res, err := s.store.DeliveryInsert(ctx, &store.DeliveryInsertParams{
		ID:            newID,
		HostID:        to.ID,
		Source:        orig.Source,
		EventID:       eventID,
		EventType:     orig.EventType,
		EventAction:   orig.EventAction,
		Headers:       headers,
		RawBody:       orig.RawBody,
		RetryDelays:   delays,
		MaxAttempts:   maxAttempts,
		CorrelationID: intake.NewCorrelationID(now),
		ReceiveNote:   delivery.ReplayReceiveNote(orig.ID, orig.HostID),
		ReceivedAt:    now,
		ReplayOf: &store.ReplayOf{HostID: orig.HostID, ID: orig.ID,
			Note: delivery.ReplayNote(newID, to.ID)},
	})
	if err != nil {
		return nil, shared.Unavailable(err)
	}
	s.log.Info("delivery replayed", "host", orig.HostID, "delivery_id", orig.ID, "to_host", to.ID, "replay_id", res.Delivery.ID)
	return res.Delivery, nil
}

type replayRequest struct {
	HostID string `json:"host_id"` // "": the same host
}

// replayDelivery is POST /api/hosts/:id/webhooks/:deliveryId/replay, with
// an optional JSON body {"host_id"} naming another host to send it to.
func (s *Server) replayDelivery(c *gin.Context) {
	var req replayRequest
	if c.Request.ContentLength != 0 {
		if err := decodeJSON(c, 4<<10, &req); err != nil {
			s.writeError(c, err)
			return
		}
	}
	if req.HostID != "" && !auth.ValidHostID(req.HostID) {
		s.writeError(c, shared.Invalid("host_id: not a host id"))
		return
	}
	d, err := s.ReplayDelivery(c.Request.Context(), c.Param("id"), c.Param("deliveryId"), req.HostID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(201, gin.H{"delivery": deliveryView(d, false), "replay_of": c.Param("deliveryId")})
}
