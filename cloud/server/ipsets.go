package server

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/ipallow"
	"github.com/relaykit/relay/shared"
)

var errNotAllowed = &shared.Error{Code: shared.CodeForbidden, Message: "this address may not send webhooks to this source"}

// clientAllowed says whether the request's client address — the TCP peer,
// or X-Forwarded-For's through RELAY_TRUSTED_PROXIES, as gin's ClientIP
// decides — is in the target's allowlist, and the address it checked
// ("" when the source has no allowlist: nothing is checked).
func clientAllowed(c *gin.Context, allow *ipallow.List) (bool, string) {
	if allow == nil || !allow.Restricted {
		return true, "" // no address to work out
	}
	ip := c.ClientIP()
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false, ip
	}
	return allow.Allows(addr), ip
}

// notAllowed answers 403 to a sender outside the source's allowlist, unread
// (the connection is closed rather than its body drained), and audits it.
func (s *Server) notAllowed(c *gin.Context, t *intake.Target, ip string) {
	c.Header("Connection", "close")
	s.reject(c, t.Source, t.Provider, 403, "client address "+ip+" is not in the source's allowed_ips", intake.OutcomeIPNotAllowed)
	s.writeError(c, errNotAllowed)
}

// checkAllowedIPs checks a source's allowlist as given to the API and
// returns it as stored; a bad entry is a 400 naming it, as is a set that
// holds no address yet (naming it would refuse every sender).
func (s *Server) checkAllowedIPs(ctx context.Context, entries []string) ([]string, error) {
	parsed, err := ipallow.ParseList(entries)
	if err != nil {
		return nil, shared.Invalid("allowed_ips: " + err.Error())
	}
	for _, e := range parsed {
		if e.Set == "" {
			continue
		}
		set, err := s.intake.IPSet(ctx, e.Set)
		if err != nil {
			return nil, err
		}
		if set.Size == 0 {
			return nil, shared.Invalid(fmt.Sprintf("allowed_ips: the IP set %q holds no address yet: refresh it first (cloud ctl ipsets refresh %s)", e.Set, e.Set))
		}
	}
	out := ipallow.Normalize(parsed)
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// listIPSets is GET /api/ipsets: every named set as in force.
func (s *Server) listIPSets(c *gin.Context) {
	out := make([]*shared.IPSet, 0, len(ipallow.Publishers))
	for _, pub := range ipallow.Publishers {
		set, err := s.intake.IPSet(c.Request.Context(), pub.Name)
		if err != nil {
			s.writeError(c, err)
			return
		}
		out = append(out, set)
	}
	c.JSON(200, gin.H{"ip_sets": out})
}

// ipSetRefresh is PUT /api/ipsets/:name's body: the list as the provider
// publishes it (its JSON, or CIDRs one a line).
type ipSetRefresh struct {
	Data string `json:"data"`
}

// refreshIPSet is PUT /api/ipsets/:name: an operator's refresh of a set.
// One that does not parse or holds no address keeps the set as it was,
// records why, and is a 400.
func (s *Server) refreshIPSet(c *gin.Context) {
	pub, ok := ipallow.Lookup(c.Param("name"))
	if !ok {
		s.writeError(c, shared.NotFound(fmt.Sprintf("no IP set %q; known: %v", c.Param("name"), ipallow.Names())))
		return
	}
	var req ipSetRefresh
	if err := decodeJSON(c, 2*intake.MaxIPSetBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	ctx := c.Request.Context()
	if err := s.intake.StoreIPSet(ctx, pub, []byte(req.Data), "file"); err != nil {
		if isUnavailable(err) {
			s.writeError(c, err)
			return
		}
		s.writeError(c, shared.Invalid(err.Error()))
		return
	}
	set, err := s.intake.IPSet(ctx, pub.Name)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, set)
}

// RunIPSetRefresh refreshes the named sets every Config.IPSetRefresh until
// ctx ends, the first time at once; it returns at once when the setting is
// 0 (off).
func (s *Server) RunIPSetRefresh(ctx context.Context) {
	every := s.cfg.IPSetRefresh
	if every <= 0 {
		return
	}
	t := s.clock.NewTicker(every)
	defer t.Stop()
	for {
		s.intake.RefreshIPSets(ctx)
		if s.ipSetsRefreshed != nil {
			s.ipSetsRefreshed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}
