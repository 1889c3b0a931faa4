package server

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// eventJSON is one step of a delivery's audit trail, in the one-delivery
// answer.
type eventJSON struct {
	At      time.Time    `json:"at"`
	From    store.Status `json:"from"`
	To      store.Status `json:"to"`
	Reason  string       `json:"reason"`
	Attempt int          `json:"attempt"`
}

// deliveryView is d as the admin API shows it; withBody adds its headers
// and body, for the one-delivery answer.
func deliveryView(d *store.Delivery, withBody bool) shared.Delivery {
	v := shared.Delivery{
		DeliveryID: d.ID, HostID: d.HostID, Source: d.Source, EventID: d.EventID, EventType: d.EventType, EventAction: d.EventAction,
		Status: string(d.Status), Attempts: d.Attempts, MaxAttempts: d.MaxAttempts, NextRetryAt: d.NextRetryAt,
		LeaseExpires: d.LeaseExpiresAt, LastError: d.LastError, ReceivedAt: d.ReceivedAt,
		DeliveredAt: d.DeliveredAt, AckedAt: d.AckedAt, DLQAt: d.DLQAt, CorrelationID: d.CorrelationID,
		BodySize: d.BodySize, ReplayOf: d.Headers[replayHeader],
	}
	if withBody {
		v.Headers = d.Headers
		v.RawBody = d.RawBody
		if v.RawBody == nil {
			v.RawBody = []byte{}
		}
	}
	return v
}

func (s *Server) listDeliveries(c *gin.Context) {
	hostID := c.Param("id")
	limit, err := queryLimit(c, 50, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	// One more than the page says whether there is a next page.
	p := &store.DeliveryListParams{HostID: hostID, Source: c.Query("source"), Limit: limit + 1}
	if v := c.Query("status"); v != "" {
		st, err := store.ParseStatus(v)
		if err != nil {
			s.writeError(c, shared.Invalid("status: "+err.Error()))
			return
		}
		p.Status = st
	}
	if p.BeforeReceivedAt, p.BeforeID, err = queryCursor(c); err != nil {
		s.writeError(c, err)
		return
	}
	if _, err := s.store.HostGet(c.Request.Context(), hostID); err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	ds, err := s.store.DeliveryList(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	writeDeliveryPage(c, ds, limit)
}

func (s *Server) getDelivery(c *gin.Context) {
	d, err := s.store.DeliveryGet(c.Request.Context(), c.Param("id"), c.Param("deliveryId"))
	if err != nil {
		s.writeError(c, notFoundAs(err, "no such delivery on this host"))
		return
	}
	evs, err := s.store.DeliveryEventList(c.Request.Context(), d.ID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	events := make([]eventJSON, 0, len(evs))
	for _, e := range evs {
		events = append(events, eventJSON{At: e.At, From: e.From, To: e.To, Reason: e.Reason, Attempt: e.Attempt})
	}
	result, err := s.store.DeliveryResultGet(c.Request.Context(), d.ID)
	if errors.Is(err, store.ErrNotFound) {
		result, err = nil, nil
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	var view *shared.HostResult
	if result != nil {
		view = resultView(result)
	}
	replays := []string{}
	for _, r := range delivery.Replays(evs) {
		replays = append(replays, r.ID)
	}
	c.JSON(200, gin.H{"delivery": deliveryView(d, true), "events": events, "host_result": view,
		"replays": replays, "next_action": delivery.Advise(d, evs, result, s.now())})
}

// Cursors are opaque to clients: base64url of "<received unix ms>:<delivery id>".
// writeDeliveryPage answers a page of deliveries, newest first, from ds
// read with one more than limit: that one says whether there is a next
// page, and next_cursor is where it starts.
func writeDeliveryPage(c *gin.Context, ds []*store.Delivery, limit int) {
	next := ""
	if len(ds) > limit {
		ds = ds[:limit]
		last := ds[len(ds)-1]
		next = EncodeCursor(last.ReceivedAt, last.ID)
	}
	out := make([]shared.Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryView(d, false))
	}
	c.JSON(200, gin.H{"webhooks": out, "next_cursor": next})
}

// queryCursor parses the `cursor` query parameter of a page of deliveries
// or of hosts (EncodeCursor's): nil when absent, else where the page
// before ended.
func queryCursor(c *gin.Context) (*time.Time, string, error) {
	v := c.Query("cursor")
	if v == "" {
		return nil, "", nil
	}
	at, id, err := DecodeCursor(v)
	if err != nil {
		return nil, "", shared.Invalid("cursor is not one this API issued")
	}
	return &at, id, nil
}

// EncodeCursor is a page's keyset cursor, the same in the API and the
// console: base64url of "<unix ms>:<id>", a delivery's receipt and id or a
// host's creation and id.
func EncodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMilli(), 10) + ":" + id))
}

// DecodeCursor reads EncodeCursor's cursor.
func DecodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", err
	}
	ms, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return time.Time{}, "", errors.New("malformed cursor")
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	return time.UnixMilli(n).UTC(), id, nil
}
