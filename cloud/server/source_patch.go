package server

import (
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
)

// sourcePatch is PATCH /api/hosts/:id/sources/:source: the fields given
// change, the rest (secrets, options, limits, retry schedule) stay as stored.
type sourcePatch struct {
	Enabled *bool     `json:"enabled"`
	Events  *[]string `json:"events"`
}

// patchSource turns a source on or off, or changes the events it takes,
// without restating (and so pinning) its other settings.
func (s *Server) patchSource(c *gin.Context) {
	hostID, name := c.Param("id"), c.Param("source")
	var req sourcePatch
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.Enabled == nil && req.Events == nil {
		s.writeError(c, errInvalid("give enabled, events or both"))
		return
	}
	src, err := s.store.SourceGet(c.Request.Context(), hostID, name)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(c, errNotFound("no such source"))
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	p := &store.SourceUpsertParams{
		HostID: hostID, Name: name, Provider: src.Provider, Enabled: src.Enabled, Events: src.Events,
		Secrets: src.Secrets, Options: src.Options, MaxBodyBytes: src.MaxBodyBytes,
		RetryDelays: src.RetryDelays, MaxAttempts: src.MaxAttempts, Now: s.now(),
	}
	if req.Enabled != nil {
		p.Enabled = *req.Enabled
	}
	if req.Events != nil {
		for _, e := range *req.Events {
			if !eventNameRE.MatchString(e) {
				s.writeError(c, errInvalid(fmt.Sprintf("bad event name %q", e)))
				return
			}
		}
		p.Events = *req.Events
	}
	src, err = s.store.SourceUpsert(c.Request.Context(), p)
	s.targets.drop(hostID)
	if err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	c.JSON(200, s.sourceView(c, src))
}
