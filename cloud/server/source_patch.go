package server

import (
	"context"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// sourcePatch is PATCH /api/hosts/:id/sources/:source and PATCH
// /api/groups/:id/sources/:source: the fields given change, the rest
// (secrets, options, limits, retry schedule) stay as stored. Mode is a
// group's source's only.
type sourcePatch struct {
	Enabled    *bool     `json:"enabled"`
	Events     *[]string `json:"events"`
	AllowedIPs *[]string `json:"allowed_ips"`
	Mode       *string   `json:"mode"`
}

func (s *Server) patchSource(c *gin.Context)      { s.patchSourceOf(c, hostOwner(c.Param("id"))) }
func (s *Server) patchGroupSource(c *gin.Context) { s.patchSourceOf(c, groupOwner(c.Param("id"))) }

// patchSourceOf turns a source on or off, or changes the events it takes
// (or a group's source's mode), without restating (and so pinning) its
// other settings.
func (s *Server) patchSourceOf(c *gin.Context, o sourceOwner) {
	var req sourcePatch
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	ch := &SourceChange{Enabled: req.Enabled, Events: req.Events, AllowedIPs: req.AllowedIPs}
	if req.Mode != nil {
		m, err := o.mode(*req.Mode)
		if err == nil && !o.group {
			err = errHostMode // even "": a host's source has no mode to give
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		ch.Mode = m
	}
	if req.Enabled == nil && req.Events == nil && req.AllowedIPs == nil && req.Mode == nil {
		what := "give enabled, events, allowed_ips or several"
		if o.group {
			what = "give enabled, events, allowed_ips, mode or several"
		}
		s.writeError(c, shared.Invalid(what))
		return
	}
	src, err := s.changeSource(c.Request.Context(), o, c.Param("source"), ch)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, s.SourceView(c, src))
}

// SourceChange is a change to some of a source's settings; nil fields
// stay as stored.
type SourceChange struct {
	Enabled *bool
	Events  *[]string
	// AllowedIPs replaces the source's allowlist (empty: any address).
	AllowedIPs *[]string
	// NewSecret, when not "", becomes the source's secret: the only one,
	// or the first beside the stored ones when KeepSecrets (a changeover,
	// at most maxSecrets in all).
	NewSecret   string
	KeepSecrets bool
	// Mode, when not "", is a group's source's new mode.
	Mode store.GroupMode
}

// ChangeSource applies a change to a source without restating its other
// settings. Errors are the API's (see Describe).
func (s *Server) ChangeSource(ctx context.Context, hostID, name string, ch *SourceChange) (*store.Source, error) {
	return s.changeSource(ctx, hostOwner(hostID), name, ch)
}

// changeSource applies a change to a source of o's.
func (s *Server) changeSource(ctx context.Context, o sourceOwner, name string, ch *SourceChange) (*store.Source, error) {
	if ch.Mode != "" && !o.group {
		return nil, errHostMode
	}
	src, err := s.store.SourceGet(ctx, o.id, name)
	if err == nil && !o.owns(src) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, notFoundAs(err, "no such source")
	}
	p := &store.SourceUpsertParams{
		HostID: o.id, Name: name, Provider: src.Provider, Enabled: src.Enabled, Events: src.Events,
		Secrets: src.Secrets, Options: src.Options, MaxBodyBytes: src.MaxBodyBytes, AllowedIPs: src.AllowedIPs,
		RetryDelays: src.RetryDelays, MaxAttempts: src.MaxAttempts, Mode: src.Mode, Now: s.now(),
	}
	if ch.Mode != "" {
		p.Mode = ch.Mode
	}
	if ch.Enabled != nil {
		p.Enabled = *ch.Enabled
	}
	if ch.Events != nil {
		if err := checkEvents(*ch.Events); err != nil {
			return nil, err
		}
		p.Events = *ch.Events
	}
	if ch.AllowedIPs != nil {
		allowed, err := s.checkAllowedIPs(ctx, *ch.AllowedIPs)
		if err != nil {
			return nil, err
		}
		p.AllowedIPs = allowed
	}
	if ch.NewSecret != "" {
		prov, ok := verify.Lookup(src.Provider)
		if !ok {
			return nil, shared.Invalid("the source's provider is no longer known: replace the source")
		}
		sealed, err := s.sealSecrets(prov, o.id, name, []string{ch.NewSecret})
		if err != nil {
			return nil, err
		}
		if ch.KeepSecrets {
			sealed = append(sealed, src.Secrets...)
			if len(sealed) > maxSecrets {
				return nil, shared.Invalid("at most 10 secrets may be active at once: rotate without keeping the current ones")
			}
		}
		p.Secrets = slices.Clip(sealed)
	}
	src, err = s.store.SourceUpsert(ctx, p)
	s.intake.Forget(o.id)
	if err != nil {
		return nil, o.notFound(err)
	}
	return src, nil
}
