package server

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// hostSources answers GET /api/hosts/sources, authenticated by a host's
// token: the host's own sources as the cloud has them (name, provider,
// enabled, the event filter, whether its provider's events carry actions;
// never a secret or its fingerprint), ordered by name, then its groups'
// (HostSourcesFor), so that the host can compare them with its
// configuration (shared.CompareSources) and warn of a source name it got
// wrong.
func (s *Server) hostSources(c *gin.Context) {
	host, err := s.authHost(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out, err := HostSourcesFor(c.Request.Context(), s.store, host.ID, nil)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, shared.HostSourcesResponse{Sources: out})
}

// HostSourcesOf is a host's sources as the host compares them with its
// configuration (shared.CompareSources): what GET /api/hosts/sources
// answers, and what the console's host page compares.
func HostSourcesOf(srcs []*store.Source) []shared.HostSource {
	out := make([]shared.HostSource, 0, len(srcs))
	for _, src := range srcs {
		events := src.Events
		if events == nil {
			events = []string{}
		}
		hs := shared.HostSource{Name: src.Name, Provider: src.Provider, Enabled: src.Enabled, Events: events}
		if p, ok := verify.Lookup(src.Provider); ok {
			actions := p.Actions()
			hs.Actions = &actions
		}
		out = append(out, hs)
	}
	return out
}

// SourceLister is what HostSourcesFor reads (a store.Store has it).
type SourceLister interface {
	SourceList(ctx context.Context, hostID string) ([]*store.Source, error)
	GroupsOfHost(ctx context.Context, hostID string) ([]store.GroupMemberOf, error)
}

// HostSourcesFor is what reaches a host's handlers, as it compares them
// with its configuration: its own sources (own, when the caller read
// them already; nil: read here), then those of the groups it belongs to,
// by name, unless it has one of that name itself (each with its group).
// GET /api/hosts/sources answers it; the console's host page compares it.
func HostSourcesFor(ctx context.Context, st SourceLister, hostID string, own []*store.Source) ([]shared.HostSource, error) {
	if own == nil {
		var err error
		if own, err = st.SourceList(ctx, hostID); err != nil {
			return nil, err
		}
	}
	out := HostSourcesOf(own)
	groups, err := st.GroupsOfHost(ctx, hostID)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, src := range out {
		named[src.Name] = true
	}
	for _, g := range groups {
		gs, err := st.SourceList(ctx, g.GroupID)
		if err != nil {
			return nil, err
		}
		for _, src := range HostSourcesOf(gs) {
			if !named[src.Name] {
				named[src.Name] = true
				src.Group = g.GroupID
				out = append(out, src)
			}
		}
	}
	return out, nil
}
