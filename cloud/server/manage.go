package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// maxRateLimit bounds a host's own intake rate limit and burst.
const maxRateLimit = 1_000_000

// hostPatchFields are the fields PATCH /api/hosts/:id accepts.
var hostPatchFields = []string{"name", "rate_limit_per_min", "rate_limit_burst"}

// parseHostPatch reads a PATCH body: a JSON object with at least one of
// hostPatchFields and nothing else. Absent fields are left as they are.
func parseHostPatch(c *gin.Context) (*store.HostUpdateParams, error) {
	var raw map[string]json.RawMessage
	if err := decodeJSON(c, 64<<10, &raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, shared.Invalid("request body must be a JSON object")
	}
	for k := range raw {
		if !slices.Contains(hostPatchFields, k) {
			return nil, shared.Invalid(fmt.Sprintf("unknown field %q; a host's patch may set %s", k, strings.Join(hostPatchFields, ", ")))
		}
	}
	if len(raw) == 0 {
		return nil, shared.Invalid("nothing to change: set one of " + strings.Join(hostPatchFields, ", "))
	}
	p := &store.HostUpdateParams{}
	if v, ok := raw["name"]; ok {
		var name string
		if string(v) == "null" || json.Unmarshal(v, &name) != nil {
			return nil, shared.Invalid("name must be a string")
		}
		name = strings.TrimSpace(name)
		if name == "" || utf8.RuneCountInString(name) > 200 {
			return nil, shared.Invalid("name must be 1 to 200 characters")
		}
		p.Name = &name
	}
	for field, dst := range map[string]**int{"rate_limit_per_min": &p.RateLimitPerMin, "rate_limit_burst": &p.RateLimitBurst} {
		v, ok := raw[field]
		if !ok {
			continue
		}
		var n int
		if string(v) == "null" || json.Unmarshal(v, &n) != nil || n < 0 || n > maxRateLimit {
			return nil, errRateLimit(field)
		}
		*dst = &n
	}
	return p, nil
}

// updateHost is PATCH /api/hosts/:id: a partial update of the host's name
// and intake rate limits.
func (s *Server) updateHost(c *gin.Context) {
	p, err := parseHostPatch(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p.HostID = c.Param("id")
	h, err := s.UpdateHost(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeHost(c, h)
}

// UpdateHost changes a host's name and intake rate limits (nil fields stay
// as they are), as PATCH /api/hosts/:id does. Errors are the API's (see
// Describe).
func (s *Server) UpdateHost(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error) {
	if p.Name != nil {
		name := strings.TrimSpace(*p.Name)
		if name == "" || utf8.RuneCountInString(name) > 200 {
			return nil, shared.Invalid("name must be 1 to 200 characters")
		}
		p.Name = &name
	}
	for field, n := range map[string]*int{"rate_limit_per_min": p.RateLimitPerMin, "rate_limit_burst": p.RateLimitBurst} {
		if n != nil && (*n < 0 || *n > maxRateLimit) {
			return nil, errRateLimit(field)
		}
	}
	h, err := s.store.HostUpdate(ctx, p)
	s.intake.Forget(p.HostID)
	if err != nil {
		return nil, hostErr(err)
	}
	s.log.Info("host updated", "host", h.ID)
	return h, nil
}

func errRateLimit(field string) error {
	return shared.Invalid(fmt.Sprintf("%s must be a whole number from 0 (the cloud's default) to %d", field, maxRateLimit))
}

// retryDelivery is POST /api/hosts/:id/webhooks/:deliveryId/retry: a
// dead-lettered or retrying delivery goes back to the queue with its
// attempts reset, for the host's next lease (its socket or its next heartbeat).
func (s *Server) retryDelivery(c *gin.Context) {
	d, err := s.RetryDelivery(c.Request.Context(), c.Param("id"), c.Param("deliveryId"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, gin.H{"delivery": deliveryView(d, false)})
}

// purgeDLQ is DELETE /api/hosts/:id/webhooks/dlq: the host's dead letters
// and their audit trails are deleted, in bounded batches.
func (s *Server) purgeDLQ(c *gin.Context) {
	n, err := s.PurgeDLQ(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, gin.H{"purged": n})
}
