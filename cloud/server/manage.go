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

// patchFields are the fields PATCH /api/hosts/:id and PATCH
// /api/groups/:id accept.
var patchFields = []string{"name", "rate_limit_per_min", "rate_limit_burst"}

// limitsPatch is what a PATCH of a host or a group changes: nil fields
// stay as they are.
type limitsPatch struct {
	Name            *string
	RateLimitPerMin *int
	RateLimitBurst  *int
}

// parseHostPatch reads PATCH /api/hosts/:id's body (parseLimitsPatch).
func parseHostPatch(c *gin.Context) (*store.HostUpdateParams, error) {
	lp, err := parseLimitsPatch(c, "a host's")
	if err != nil {
		return nil, err
	}
	return &store.HostUpdateParams{Name: lp.Name, RateLimitPerMin: lp.RateLimitPerMin, RateLimitBurst: lp.RateLimitBurst}, nil
}

// parseLimitsPatch reads a PATCH body of whose ("a host's"): a JSON object
// with at least one of patchFields and nothing else. Absent fields are
// left as they are.
func parseLimitsPatch(c *gin.Context, whose string) (*limitsPatch, error) {
	var raw map[string]json.RawMessage
	if err := decodeJSON(c, 64<<10, &raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, shared.Invalid("request body must be a JSON object")
	}
	for k := range raw {
		if !slices.Contains(patchFields, k) {
			return nil, shared.Invalid(fmt.Sprintf("unknown field %q; %s patch may set %s", k, whose, strings.Join(patchFields, ", ")))
		}
	}
	if len(raw) == 0 {
		return nil, shared.Invalid("nothing to change: set one of " + strings.Join(patchFields, ", "))
	}
	p := &limitsPatch{}
	if v, ok := raw["name"]; ok {
		var name string
		if string(v) == "null" || json.Unmarshal(v, &name) != nil {
			return nil, shared.Invalid("name must be a string")
		}
		name, err := checkName(name)
		if err != nil {
			return nil, err
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

// checkName trims a host's or a group's name and checks its length.
func checkName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 200 {
		return "", shared.Invalid("name must be 1 to 200 characters")
	}
	return name, nil
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
	var err error
	if p.Name, err = checkUpdate(p.Name, p.RateLimitPerMin, p.RateLimitBurst); err != nil {
		return nil, err
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

// checkUpdate checks a change of a host's or group's name and intake rate
// limits (nil: unchanged), and returns the name as it is stored.
func checkUpdate(name *string, perMin, burst *int) (*string, error) {
	if name != nil {
		n, err := checkName(*name)
		if err != nil {
			return nil, err
		}
		name = &n
	}
	for field, n := range map[string]*int{"rate_limit_per_min": perMin, "rate_limit_burst": burst} {
		if n != nil && (*n < 0 || *n > maxRateLimit) {
			return nil, errRateLimit(field)
		}
	}
	return name, nil
}
