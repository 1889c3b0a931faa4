package server

import (
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

func resultView(r *store.DeliveryResult) *shared.HostResult {
	return &shared.HostResult{Attempt: r.Attempt, Result: r.Result, Handler: r.Handler, ResponseStatus: r.ResponseStatus,
		ExitCode: r.ExitCode, DurationMS: r.DurationMS, Error: r.Error, ReportedAt: r.ReportedAt}
}

// findDeliveries answers GET /api/deliveries: deliveries of every host (or
// of `host`), newest first, filtered by `status`, `source`, `provider`,
// `event_id`, `correlation_id` and `since` (RFC 3339); `limit` (1–500,
// default 50) and `cursor`.
func (s *Server) findDeliveries(c *gin.Context) {
	p, limit, err := findParams(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p.HostID = c.Query("host")
	s.writeFound(c, p, limit)
}

// findParams reads the filters and page of a find, asking one more than
// the page holds: that one says whether there is a next page.
func findParams(c *gin.Context) (*store.DeliveryFindParams, int, error) {
	limit, err := queryLimit(c, 50, 500)
	if err != nil {
		return nil, 0, err
	}
	p := &store.DeliveryFindParams{Source: c.Query("source"), Provider: c.Query("provider"),
		EventID: c.Query("event_id"), CorrelationID: c.Query("correlation_id"), Limit: limit + 1}
	if v := c.Query("status"); v != "" {
		st, err := store.ParseStatus(v)
		if err != nil {
			return nil, 0, shared.Invalid("status: " + err.Error())
		}
		p.Status = st
	}
	if v := c.Query("since"); v != "" {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, 0, shared.Invalid("since: want an RFC 3339 time, e.g. 2026-11-25T09:00:00Z")
		}
		p.ReceivedSince = &at
	}
	if p.BeforeReceivedAt, p.BeforeID, err = queryCursor(c); err != nil {
		return nil, 0, err
	}
	return p, limit, nil
}

func (s *Server) writeFound(c *gin.Context, p *store.DeliveryFindParams, limit int) {
	ds, err := s.store.DeliveryFind(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	writeDeliveryPage(c, ds, limit)
}

type eventOfJSON struct {
	ID         int64        `json:"id"`
	DeliveryID string       `json:"delivery_id"`
	HostID     string       `json:"host_id"`
	Source     string       `json:"source"`
	At         time.Time    `json:"at"`
	From       store.Status `json:"from"`
	To         store.Status `json:"to"`
	Reason     string       `json:"reason"`
	Attempt    int          `json:"attempt"`
}

// listEvents answers GET /api/events: the audit trail of every delivery,
// oldest first, after the event id `after` (default 0), or the `last` n;
// `limit` (1–500, default 100). `next_after` is where the next call starts.
func (s *Server) listEvents(c *gin.Context) {
	limit, err := queryLimit(c, 100, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var after int64
	if v := c.Query("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			s.writeError(c, shared.Invalid("after: want an event id (a non-negative integer)"))
			return
		}
	}
	p := &store.DeliveryEventListAfterParams{AfterID: after, Limit: limit}
	if v := c.Query("last"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			s.writeError(c, shared.Invalid("last: want an integer from 1 to 500"))
			return
		}
		p.Newest, p.Limit = true, n
	}
	evs, err := s.store.DeliveryEventListAfter(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]eventOfJSON, 0, len(evs))
	for _, e := range evs {
		out = append(out, eventOfJSON{ID: e.ID, DeliveryID: e.DeliveryID, HostID: e.HostID, Source: e.Source, At: e.At,
			From: e.From, To: e.To, Reason: e.Reason, Attempt: e.Attempt})
		after = e.ID
	}
	c.JSON(200, gin.H{"events": out, "next_after": after})
}

// hostDeliveries answers GET /api/hosts/deliveries, authenticated by a
// host's token: the host's own deliveries, newest first, with the filters
// and pages of GET /api/deliveries, so that it can reconcile its ledger
// with what the cloud recorded.
func (s *Server) hostDeliveries(c *gin.Context) {
	host, err := s.authHost(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p, limit, err := findParams(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p.HostID = host.ID // its own, whatever it asks
	s.writeFound(c, p, limit)
}
