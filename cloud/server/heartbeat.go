package server

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// heartbeat applies a host's acks, nacks and extends, records that it is
// alive, and hands out its next batch of deliveries under a lease. The host
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
	ctx := c.Request.Context()
	now := s.now()

	if len(req.WebhookAcks) > 0 {
		if _, err := s.store.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: host.ID, IDs: req.WebhookAcks, Now: now}); err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
	}
	if len(req.WebhookNacks) > 0 {
		nacks := make([]delivery.Nack, len(req.WebhookNacks))
		for i, n := range req.WebhookNacks {
			nacks[i] = delivery.Nack{ID: n.DeliveryID, Error: truncate(n.Error, 2000), Retryable: n.Retryable, Attempt: n.Attempt}
		}
		if _, err := s.store.DeliveryNack(ctx, delivery.NackParams(host.ID, nacks, delivery.DefaultRetryPolicy, now)); err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
	}
	if len(req.WebhookExtends) > 0 {
		if _, err := s.store.DeliveryExtend(ctx, &store.DeliveryExtendParams{HostID: host.ID, IDs: req.WebhookExtends, LeaseFor: s.cfg.LeaseFor, Now: now}); err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
	}
	if req.AnswerLost {
		// What the lost answer leased, the host does not hold: due again at
		// once, in this very answer if there is room. (Its acks above are
		// applied already: acked deliveries are no longer leased.)
		n, err := s.store.DeliveryReleaseUnheld(ctx, delivery.ReleaseUnheldParams(host.ID, req.WebhooksHeld, delivery.DefaultRetryPolicy, now))
		if err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
		if n > 0 {
			s.log.Info("host lost a heartbeat answer; its deliveries are due again", "host", host.ID, "deliveries", n)
		}
	}
	hb := &store.HostHeartbeatParams{HostID: host.ID, AgentVersion: truncate(req.AgentVersion, 100), Now: now}
	if req.Config != nil {
		sub, err := json.Marshal(req.Config)
		if err != nil {
			s.writeError(c, err)
			return
		}
		hb.Subscription = sub
	}
	if needsRecording(host, hb) {
		err = s.store.HostHeartbeat(ctx, hb)
		if hb.Subscription != nil {
			s.targets.drop(host.ID) // intake filters by the subscription
		}
		if err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
	}

	max := shared.DefaultMaxWebhooks
	if req.MaxWebhooks != nil {
		max = min(*req.MaxWebhooks, shared.MaxMaxWebhooks)
	}
	var leased []*store.Delivery
	more := false
	if max > 0 {
		// A host that asks to wait is listening before it looks, so that
		// work arriving in between still wakes it.
		var wake <-chan struct{}
		wait := min(time.Duration(req.WaitS)*time.Second, s.cfg.MaxWait)
		if wait > 0 {
			ch, unsubscribe := s.wakeups.subscribe(host.ID)
			defer unsubscribe()
			wake = ch
		}
		p := &store.DeliveryLeaseParams{HostID: host.ID, Max: max, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: now}
		res, err := s.store.DeliveryLease(ctx, p)
		if err == nil && len(res.Deliveries) == 0 && wake != nil {
			res, err = s.awaitWork(ctx, p, host.Generation, wait, wake)
		}
		if err != nil {
			s.writeError(c, errUnavailable(err))
			return
		}
		leased, more = res.Deliveries, res.More
	}

	// more: available work was left over, cut by the batch's count or byte
	// bound; the host comes back at once.
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: s.intervalS(), More: more, Webhooks: make([]shared.Webhook, 0, len(leased))}
	ids := make([]string, 0, len(leased))
	for _, d := range leased {
		ids = append(ids, d.ID)
		resp.Webhooks = append(resp.Webhooks, toWire(d, !req.RawBodyOnly))
	}

	// The host may be gone by now: what follows is recorded regardless.
	ctx = context.WithoutCancel(ctx)
	if err := s.writeJSON(c, 200, resp); err != nil {
		// Not handed out: the attempt failed and is due again at once. A
		// release that fails leaves them to the lease expiry, which does the
		// same.
		s.log.Warn("heartbeat response not written", "host", host.ID, "leased", len(ids), "err", err)
		if len(ids) > 0 {
			if _, err := s.store.DeliveryRelease(ctx, delivery.ReleaseParams(host.ID, ids, delivery.DefaultRetryPolicy, s.now())); err != nil {
				s.log.Warn("release unwritten deliveries", "host", host.ID, "err", err)
			}
		}
		return
	}
	if len(ids) > 0 {
		if _, err := s.store.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: host.ID, IDs: ids, Now: s.now()}); err != nil {
			s.log.Warn("mark delivered", "host", host.ID, "err", err)
		}
		s.log.LogAttrs(ctx, slog.LevelDebug, "leased", slog.String("host", host.ID), slog.Int("count", len(ids)))
	}
}

// heartbeatRecordEvery is how often a host's last heartbeat is written when
// nothing else about it changed: a host draining a backlog heartbeats
// back to back, and a commit for each would only move a timestamp by
// milliseconds.
const heartbeatRecordEvery = time.Second

// needsRecording says whether a heartbeat changes the stored host: a new
// subscription or agent version, or the last one recorded a while ago.
func needsRecording(h *store.Host, hb *store.HostHeartbeatParams) bool {
	return hb.Subscription != nil || hb.AgentVersion != h.AgentVersion || h.LastHeartbeatAt == nil ||
		hb.Now.Sub(*h.LastHeartbeatAt) >= heartbeatRecordEvery
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
