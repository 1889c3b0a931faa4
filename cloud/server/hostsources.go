package server

import (
	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// hostSources answers GET /api/hosts/sources, authenticated by a host's
// token: the host's own sources as the cloud has them (name, provider,
// enabled, the event filter; never a secret or its fingerprint), ordered by
// name, so that the host can compare them with its configuration
// (shared.CompareSources) and warn of a source name it got wrong.
func (s *Server) hostSources(c *gin.Context) {
	host, err := s.authHost(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ctx := c.Request.Context()
	srcs, err := s.store.SourceList(ctx, host.ID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := HostSourcesOf(srcs)
	// The sources of the groups it belongs to reach its handlers too, by
	// name: listed unless it has one of that name itself.
	groups, err := s.store.GroupsOfHost(ctx, host.ID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	own := map[string]bool{}
	for _, src := range out {
		own[src.Name] = true
	}
	for _, g := range groups {
		gs, err := s.store.SourceList(ctx, g.GroupID)
		if err != nil {
			s.writeError(c, err)
			return
		}
		for _, src := range HostSourcesOf(gs) {
			if !own[src.Name] {
				own[src.Name] = true
				src.Group = g.GroupID
				out = append(out, src)
			}
		}
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
		out = append(out, shared.HostSource{Name: src.Name, Provider: src.Provider, Enabled: src.Enabled, Events: events})
	}
	return out
}
