package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// The admin API of groups of hosts (/api/groups): a group, its members in
// order, and its sources, each with a mode (fanout or any), at the
// group's own URL /api/webhooks/:groupId/:source. A group's sources are
// set as a host's are (sources.go), with the mode besides.

func groupErr(err error) error { return notFoundAs(err, "no such group") }

// maxGroupPosition bounds a member's position.
const maxGroupPosition = 1_000_000

// checkGroupID answers 404 for a group id that could not exist (not of
// NewGroupID's form) before anything looks it up.
func (s *Server) checkGroupID(c *gin.Context) {
	if id := c.Param("id"); id != "" && !auth.ValidGroupID(id) {
		s.writeError(c, shared.NotFound("no such group"))
		return
	}
	c.Next()
}

// groupView is a group as the admin API shows it, its members with what
// the host list says of each (hosts, by id).
func (s *Server) groupView(c *gin.Context, g *store.Group, hosts map[string]*store.Host) shared.Group {
	v := shared.Group{
		ID: g.ID, Name: g.Name, Status: string(g.Status), RateLimitPerMin: g.RateLimitPerMin, RateLimitBurst: g.RateLimitBurst,
		CreatedAt: g.CreatedAt, DeactivatedAt: g.DeactivatedAt,
		WebhookURL: s.publicURL(c) + shared.PathWebhooks + "/" + g.ID + "/{source}",
		Members:    make([]shared.GroupMember, 0, len(g.Members)),
	}
	for _, m := range g.Members {
		mv := shared.GroupMember{HostID: m.HostID, Position: m.Position, AddedAt: m.AddedAt}
		if h, ok := hosts[m.HostID]; ok {
			mv.Name, mv.Status, mv.Claimed = h.Name, string(h.Status), h.CredentialHash != nil
			mv.Presence, mv.LastHeartbeatAt = string(s.Presence(h)), h.LastHeartbeatAt
		}
		v.Members = append(v.Members, mv)
	}
	return v
}

// hostsByID reads every host, by id, for groupView.
func (s *Server) hostsByID(ctx context.Context) (map[string]*store.Host, error) {
	hosts, err := s.store.HostList(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*store.Host, len(hosts))
	for _, h := range hosts {
		out[h.ID] = h
	}
	return out, nil
}

// writeGroup answers one group with status.
func (s *Server) writeGroup(c *gin.Context, status int, g *store.Group) {
	hosts, err := s.hostsByID(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(status, s.groupView(c, g, hosts))
}

// createGroup is POST /api/groups.
func (s *Server) createGroup(c *gin.Context) {
	var req shared.CreateGroupRequest
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	g, err := s.CreateGroup(c.Request.Context(), &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeGroup(c, 201, g)
}

// CreateGroup creates a group with no members, as POST /api/groups does.
// Errors are the API's (see Describe).
func (s *Server) CreateGroup(ctx context.Context, req *shared.CreateGroupRequest) (*store.Group, error) {
	name, err := checkName(req.Name)
	if err != nil {
		return nil, err
	}
	for field, n := range map[string]int{"rate_limit_per_min": req.RateLimitPerMin, "rate_limit_burst": req.RateLimitBurst} {
		if n < 0 || n > maxRateLimit {
			return nil, errRateLimit(field)
		}
	}
	id := auth.NewGroupID()
	g, err := s.store.GroupCreate(ctx, &store.GroupCreateParams{
		ID: id, Name: name, RateLimitPerMin: req.RateLimitPerMin, RateLimitBurst: req.RateLimitBurst, Now: s.now(),
	})
	s.intake.Forget(id) // even on an error: it may have committed
	if err != nil {
		return nil, err
	}
	s.log.Info("group created", "group", g.ID)
	return g, nil
}

// listGroups is GET /api/groups: every group with its members, oldest
// first.
func (s *Server) listGroups(c *gin.Context) {
	groups, err := s.store.GroupList(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	hosts, err := s.hostsByID(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]shared.Group, 0, len(groups))
	for _, g := range groups {
		out = append(out, s.groupView(c, g, hosts))
	}
	c.JSON(200, gin.H{"groups": out})
}

// getGroup is GET /api/groups/:id: the group, its members and its sources.
func (s *Server) getGroup(c *gin.Context) {
	ctx := c.Request.Context()
	g, err := s.store.GroupGet(ctx, c.Param("id"))
	if err != nil {
		s.writeError(c, groupErr(err))
		return
	}
	srcs, err := s.store.SourceList(ctx, g.ID)
	if err != nil {
		s.writeError(c, err)
		return
	}
	hosts, err := s.hostsByID(ctx)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, shared.GroupDetail{Group: s.groupView(c, g, hosts), Sources: s.sourceViews(c, srcs)})
}

// updateGroup is PATCH /api/groups/:id: a partial update of the group's
// name and intake rate limits.
func (s *Server) updateGroup(c *gin.Context) {
	lp, err := parseLimitsPatch(c, "a group's")
	if err != nil {
		s.writeError(c, err)
		return
	}
	g, err := s.UpdateGroup(c.Request.Context(), &store.GroupUpdateParams{
		GroupID: c.Param("id"), Name: lp.Name, RateLimitPerMin: lp.RateLimitPerMin, RateLimitBurst: lp.RateLimitBurst,
	})
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeGroup(c, 200, g)
}

// UpdateGroup changes a group's name and intake rate limits (nil fields
// stay as they are), as PATCH /api/groups/:id does. Errors are the API's
// (see Describe).
func (s *Server) UpdateGroup(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	var err error
	if p.Name, err = checkUpdate(p.Name, p.RateLimitPerMin, p.RateLimitBurst); err != nil {
		return nil, err
	}
	g, err := s.store.GroupUpdate(ctx, p)
	s.intake.Forget(p.GroupID)
	if err != nil {
		return nil, groupErr(err)
	}
	s.log.Info("group updated", "group", g.ID)
	return g, nil
}

// deactivateGroup is POST /api/groups/:id/deactivate: the group's URLs
// stop taking webhooks; what its members hold is delivered as before.
func (s *Server) deactivateGroup(c *gin.Context) {
	id := c.Param("id")
	g, err := s.store.GroupDeactivate(c.Request.Context(), &store.GroupDeactivateParams{GroupID: id, Now: s.now()})
	s.intake.Forget(id)
	if err != nil {
		s.writeError(c, groupErr(err))
		return
	}
	s.log.Info("group deactivated", "group", g.ID)
	s.writeGroup(c, 200, g)
}

// putMember is PUT /api/groups/:id/members/:hostId, with an optional body
// {"position": n}: the host joins the group (a member already there keeps
// its place).
func (s *Server) putMember(c *gin.Context) {
	var req shared.GroupMemberRequest
	if c.Request.ContentLength != 0 {
		if err := decodeJSON(c, 64<<10, &req); err != nil {
			s.writeError(c, err)
			return
		}
	}
	g, err := s.AddMember(c.Request.Context(), c.Param("id"), c.Param("hostId"), req.Position)
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.writeGroup(c, 200, g)
}

// AddMember adds an active host to an active group at position (0: after
// the last), as PUT /api/groups/:id/members/:hostId does. Errors are the
// API's (see Describe): not found for an unknown group or host, gone for
// a deactivated one.
func (s *Server) AddMember(ctx context.Context, groupID, hostID string, position int) (*store.Group, error) {
	if position < 0 || position > maxGroupPosition {
		return nil, shared.Invalid(fmt.Sprintf("position must be a whole number from 0 (after the last member) to %d", maxGroupPosition))
	}
	if !auth.ValidGroupID(groupID) {
		return nil, shared.NotFound("no such group")
	}
	if !auth.ValidHostID(hostID) {
		return nil, shared.NotFound("no such host")
	}
	g, err := s.store.GroupMemberAdd(ctx, &store.GroupMemberParams{GroupID: groupID, HostID: hostID, Position: position, Now: s.now()})
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.whyNotMember(ctx, groupID, hostID, err)
	}
	s.intake.Forget(groupID)
	if err != nil {
		return nil, err
	}
	s.log.Info("group member added", "group", groupID, "host", hostID)
	return g, nil
}

// whyNotMember says why a host could not join a group: which of the two
// is unknown or deactivated (err, the store's, when neither is).
func (s *Server) whyNotMember(ctx context.Context, groupID, hostID string, err error) error {
	g, gerr := s.store.GroupGet(ctx, groupID)
	switch {
	case errors.Is(gerr, store.ErrNotFound):
		return shared.NotFound("no such group")
	case gerr != nil:
		return gerr
	case g.Status != store.HostActive:
		return &shared.Error{Code: shared.CodeGone, Message: "group is deactivated: it takes no new members"}
	}
	h, herr := s.store.HostGet(ctx, hostID)
	switch {
	case errors.Is(herr, store.ErrNotFound):
		return shared.NotFound("no such host")
	case herr != nil:
		return herr
	case h.Status != store.HostActive:
		return &shared.Error{Code: shared.CodeGone, Message: "host is deactivated: it cannot join a group"}
	}
	return err
}

// deleteMember is DELETE /api/groups/:id/members/:hostId: the host leaves
// the group. The answer says how many of the group's fanout deliveries it
// held unfinished were cancelled (dead-lettered); the any deliveries it
// held go to another member.
func (s *Server) deleteMember(c *gin.Context) {
	ctx := c.Request.Context()
	out, err := s.RemoveMember(ctx, c.Param("id"), c.Param("hostId"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	hosts, err := s.hostsByID(ctx)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, shared.GroupMemberRemoved{Group: s.groupView(c, out.Group, hosts), Cancelled: out.Cancelled})
}

// RemoveMember removes a host from a group, as DELETE
// /api/groups/:id/members/:hostId does. Errors are the API's (see
// Describe).
func (s *Server) RemoveMember(ctx context.Context, groupID, hostID string) (*store.GroupMemberRemoved, error) {
	if !auth.ValidGroupID(groupID) {
		return nil, shared.NotFound("no such group")
	}
	out, err := s.store.GroupMemberRemove(ctx, &store.GroupMemberParams{GroupID: groupID, HostID: hostID, Now: s.now()})
	s.intake.Forget(groupID)
	if errors.Is(err, store.ErrNotFound) {
		if _, gerr := s.store.GroupGet(ctx, groupID); errors.Is(gerr, store.ErrNotFound) {
			return nil, shared.NotFound("no such group")
		}
		return nil, shared.NotFound("the host is no member of the group")
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("group member removed", "group", groupID, "host", hostID, "cancelled", out.Cancelled)
	return out, nil
}
