package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

type quarantinedJSON struct {
	ID          int64     `json:"id"`
	HostID      string    `json:"host_id"`
	Source      string    `json:"source"`
	ReceivedAt  time.Time `json:"received_at"`
	ClientIP    string    `json:"client_ip"`
	HeaderNames []string  `json:"header_names"`
	BodySize    int       `json:"body_size"`
	Kind        string    `json:"kind"`
	Reason      string    `json:"reason"`
}

// listQuarantine answers GET /api/quarantine: how many requests wait, for a
// key (kind secret) or for an operator (kind replay: held suspected
// replays, each with why), and the oldest of them (no bodies, no header
// values); `limit` 1..500, default 100.
func (s *Server) listQuarantine(c *gin.Context) {
	limit, err := queryLimit(c, 100, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ctx := c.Request.Context()
	n, err := s.store.QuarantineCount(ctx)
	if err != nil {
		s.writeError(c, err)
		return
	}
	qs, err := s.store.QuarantineList(ctx, &store.QuarantineListParams{Limit: limit})
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]quarantinedJSON, 0, len(qs))
	for _, q := range qs {
		out = append(out, quarantinedJSON{
			ID: q.ID, HostID: q.HostID, Source: q.Source, ReceivedAt: q.ReceivedAt, ClientIP: q.ClientIP,
			HeaderNames: store.CutHeaderNames(intake.HeaderNames(http.Header(q.Header))), BodySize: len(q.Body),
			Kind: q.Kind, Reason: q.Reason,
		})
	}
	c.JSON(200, gin.H{"count": n, "requests": out})
}

// releaseQuarantine answers POST /api/quarantine/release: one release pass
// now (after a source's secret was replaced, say), rather than at the next
// minute.
func (s *Server) releaseQuarantine(c *gin.Context) {
	res, err := s.ReleaseQuarantine(c.Request.Context())
	if err != nil {
		s.writeError(c, shared.Unavailable(err))
		return
	}
	c.JSON(200, gin.H{"admitted": res.Admitted, "rejected": res.Rejected, "held": res.Held})
}

// releaseHeld answers POST /api/quarantine/:id/release: a held suspected
// replay is admitted past the replay guard (intake's ReleaseHeld).
func (s *Server) releaseHeld(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		s.writeError(c, shared.Invalid("id: a quarantined request's id"))
		return
	}
	res, err := s.intake.ReleaseHeld(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, res.Response)
}

// ReleaseQuarantine runs one release pass over the requests held for a
// key (intake's ReleaseQuarantine).
func (s *Server) ReleaseQuarantine(ctx context.Context) (intake.ReleaseResult, error) {
	return s.intake.ReleaseQuarantine(ctx)
}

// RunQuarantineRelease releases the quarantine at once and then every
// interval until ctx ends.
func (s *Server) RunQuarantineRelease(ctx context.Context, every time.Duration) {
	s.intake.RunQuarantineRelease(ctx, s.clock, every)
}

// ReportCanary checks the canary and logs what an operator must know; the
// relay_secret_keys_ok gauge follows it.
func (s *Server) ReportCanary(ctx context.Context) error { return s.intake.ReportCanary(ctx) }

// ReloadKeys makes the server use ring from now on (intake's ReloadKeys).
func (s *Server) ReloadKeys(ctx context.Context, ring *secrets.Ring) error {
	return s.intake.ReloadKeys(ctx, ring)
}
