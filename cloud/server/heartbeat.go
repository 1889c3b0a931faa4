package server

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// heartbeat applies a host's acks, nacks and extends, records that it is
// alive, and hands out its next batch of deliveries under a lease: the
// delivery core's Heartbeat, decoded from and encoded to the wire. The host
// id comes only from the verified token.
func (s *Server) heartbeat(c *gin.Context) {
	host, err := s.authHost(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var req shared.HeartbeatRequest
	if err := decodeJSON(c, s.cfg.MaxHeartbeatReq, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if err := validateHeartbeat(&req); err != nil {
		s.writeError(c, err)
		return
	}
	hb, err := fromWire(&req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ctx := c.Request.Context()
	res, err := s.deliveries.Heartbeat(ctx, host, hb)
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}

	// more: available work was left over, cut by the batch's count or byte
	// bound; the host comes back at once.
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: s.intervalS(), More: res.More, Webhooks: make([]shared.Webhook, 0, len(res.Deliveries)),
		Now: s.deliveries.Now(), LeaseS: int(s.deliveries.LeaseFor() / time.Second)}
	ids := make([]string, 0, len(res.Deliveries))
	for _, d := range res.Deliveries {
		ids = append(ids, d.ID)
		steptime.Stamp(d.Headers, "encoded", time.Now())
		resp.Webhooks = append(resp.Webhooks, toWire(d, !req.RawBodyOnly))
	}
	err = s.writeJSON(c, 200, resp)
	if err != nil {
		s.log.Warn("heartbeat response not written", "host", host.ID, "leased", len(ids), "err", err)
	}
	// The host may be gone by now: what follows is recorded regardless.
	s.deliveries.Handed(ctx, host.ID, ids, err)
}

// fromWire is a heartbeat request as the delivery core takes it.
func fromWire(req *shared.HeartbeatRequest) (*delivery.Heartbeat, error) {
	hb := &delivery.Heartbeat{
		Report: delivery.Report{Acks: req.WebhookAcks, Extends: req.WebhookExtends,
			AnswerLost: req.AnswerLost, Held: req.WebhooksHeld},
		Beat: delivery.Beat{AgentVersion: truncate(req.AgentVersion, 100)},
		Max:  shared.DefaultMaxWebhooks,
		Wait: time.Duration(req.WaitS) * time.Second,
	}
	if len(req.WebhookNacks) > 0 {
		hb.Nacks = make([]delivery.Nack, len(req.WebhookNacks))
		for i, n := range req.WebhookNacks {
			hb.Nacks[i] = delivery.Nack{ID: n.DeliveryID, Error: truncate(n.Error, 2000), Retryable: n.Retryable, Attempt: n.Attempt}
		}
	}
	for _, r := range req.WebhookResults {
		hb.Results = append(hb.Results, store.DeliveryResult{DeliveryID: r.DeliveryID, Attempt: r.Attempt, Result: r.Result,
			Handler: r.Handler, ResponseStatus: r.ResponseStatus, ExitCode: r.ExitCode, DurationMS: r.DurationMS, Error: r.Error})
	}
	if req.Config != nil {
		sub, err := json.Marshal(req.Config)
		if err != nil {
			return nil, err
		}
		hb.Subscription = sub
	}
	if req.MaxWebhooks != nil {
		hb.Max = min(*req.MaxWebhooks, shared.MaxMaxWebhooks)
	}
	return hb, nil
}

func validateHeartbeat(req *shared.HeartbeatRequest) error {
	if req.MaxWebhooks != nil && *req.MaxWebhooks < 0 {
		return errInvalid("max_webhooks must not be negative")
	}
	if req.WaitS < 0 {
		return errInvalid("wait_s must not be negative")
	}
	for i, id := range req.WebhookAcks {
		if id == "" {
			return errInvalid(fmt.Sprintf("webhook_acks[%d] is empty", i))
		}
	}
	for i, n := range req.WebhookNacks {
		if n.DeliveryID == "" {
			return errInvalid(fmt.Sprintf("webhook_nacks[%d].delivery_id is empty", i))
		}
	}
	for i, id := range req.WebhookExtends {
		if id == "" {
			return errInvalid(fmt.Sprintf("webhook_extends[%d] is empty", i))
		}
	}
	for i, id := range req.WebhooksHeld {
		if id == "" {
			return errInvalid(fmt.Sprintf("webhooks_held[%d] is empty", i))
		}
	}
	for i, r := range req.WebhookResults {
		if r.DeliveryID == "" || !store.ResultValid(r.Result) {
			return errInvalid(fmt.Sprintf("webhook_results[%d]: want a delivery_id and a result of success, error or skipped", i))
		}
	}
	if len(req.WebhookResults) > len(req.WebhookAcks)+len(req.WebhookNacks) {
		return errInvalid("more webhook_results than acks and nacks")
	}
	if len(req.WebhooksHeld) > 0 && !req.AnswerLost {
		return errInvalid("webhooks_held is only sent with answer_lost")
	}
	if n := len(req.WebhookAcks) + len(req.WebhookNacks) + len(req.WebhookExtends); n > 10*shared.MaxMaxWebhooks {
		return errInvalid(fmt.Sprintf("too many acks, nacks and extends in one heartbeat (%d)", n))
	}
	if n := len(req.WebhooksHeld); n > 10*shared.MaxMaxWebhooks {
		return errInvalid(fmt.Sprintf("too many held webhooks in one heartbeat (%d)", n))
	}
	return nil
}

// toWire is a leased delivery as the host receives it; withBody adds the
// parsed copy of a JSON body.
func toWire(d *store.Delivery, withBody bool) shared.Webhook {
	w := shared.Webhook{
		DeliveryID: d.ID, Source: d.Source, EventType: d.EventType, EventAction: d.EventAction,
		Headers: d.Headers, RawBody: d.RawBody, ReceivedAt: d.ReceivedAt, Attempt: d.Attempts,
		CorrelationID: d.CorrelationID,
	}
	if w.Headers == nil {
		w.Headers = map[string]string{}
	}
	if w.RawBody == nil {
		w.RawBody = []byte{}
	}
	if withBody && json.Valid(d.RawBody) {
		w.Body = d.RawBody
	}
	return w
}

// writeJSON writes v, gzip-compressed when the client accepts it, and
// reports whether the whole answer was written.
func (s *Server) writeJSON(c *gin.Context, status int, v any) error {
	c.Header("Content-Type", "application/json; charset=utf-8")
	c.Header("Vary", "Accept-Encoding")
	if !strings.Contains(c.GetHeader("Accept-Encoding"), "gzip") {
		c.Status(status)
		if err := json.NewEncoder(c.Writer).Encode(v); err != nil {
			return fmt.Errorf("write response: %w", err)
		}
		return flush(c.Writer)
	}
	c.Header("Content-Encoding", "gzip")
	c.Status(status)
	// The fastest level: a batch of webhooks is megabytes of JSON, and the
	// cloud's CPU is what a draining host waits on.
	zw, _ := gzip.NewWriterLevel(c.Writer, gzip.BestSpeed)
	if err := json.NewEncoder(zw).Encode(v); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return flush(c.Writer)
}

// flush sends what is buffered of the answer to the connection, so that a
// host that is gone shows as an error here rather than after the handler.
func flush(w http.ResponseWriter) error {
	for {
		if f, ok := w.(interface{ FlushError() error }); ok {
			if err := f.FlushError(); err != nil {
				return fmt.Errorf("write response: %w", err)
			}
			return nil
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}
