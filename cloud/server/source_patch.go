package server

import (
	"context"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// sourcePatch is PATCH /api/hosts/:id/sources/:source: the fields given
// change, the rest (secrets, options, limits, retry schedule) stay as stored.
type sourcePatch struct {
	Enabled    *bool     `json:"enabled"`
	Events     *[]string `json:"events"`
	AllowedIPs *[]string `json:"allowed_ips"`
}

// patchSource turns a source on or off, or changes the events it takes,
// without restating (and so pinning) its other settings.
func (s *Server) patchSource(c *gin.Context) {
	var req sourcePatch
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.Enabled == nil && req.Events == nil && req.AllowedIPs == nil {
		s.writeError(c, shared.Invalid("give enabled, events, allowed_ips or several"))
		return
	}
	src, err := s.ChangeSource(c.Request.Context(), c.Param("id"), c.Param("source"),
		&SourceChange{Enabled: req.Enabled, Events: req.Events, AllowedIPs: req.AllowedIPs})
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
}

// ChangeSource applies a change to a source without restating its other
// settings. Errors are the API's (see Describe).
func (s *Server) ChangeSource(ctx context.Context, hostID, name string, ch *SourceChange) (*store.Source, error) {
	src, err := s.store.SourceGet(ctx, hostID, name)
	if err != nil {
		return nil, notFoundAs(err, "no such source")
	}
	p := &store.SourceUpsertParams{
		HostID: hostID, Name: name, Provider: src.Provider, Enabled: src.Enabled, Events: src.Events,
		Secrets: src.Secrets, Options: src.Options, MaxBodyBytes: src.MaxBodyBytes, AllowedIPs: src.AllowedIPs,
		RetryDelays: src.RetryDelays, MaxAttempts: src.MaxAttempts, Now: s.now(),
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
		sealed, err := s.sealSecrets(prov, hostID, name, []string{ch.NewSecret})
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
	s.intake.Forget(hostID)
	if err != nil {
		return nil, hostErr(err)
	}
	return src, nil
}
