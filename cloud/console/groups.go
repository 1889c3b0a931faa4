package console

import (
	"errors"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// hostState is how a host is doing as the hosts page shows it (the
// "hoststate" template): deactivated, not claimed, or its presence.
type hostState struct {
	Status      store.HostStatus
	Claimed     bool
	Presence    store.Presence
	LastContact *time.Time
}

// stateOf is h's state, its presence as the API derives it.
func (cn *Console) stateOf(h *store.Host) hostState {
	return hostState{Status: h.Status, Claimed: h.CredentialHash != nil, Presence: cn.d.App.Presence(h), LastContact: h.LastHeartbeatAt}
}

// groupRow is a line of the groups page.
type groupRow struct {
	ID, Name string
	Status   store.HostStatus
	Members  int
	Sources  int
}

type groupsData struct {
	Groups []groupRow
}

func (cn *Console) groupsPage(c *gin.Context) {
	ctx := c.Request.Context()
	groups, err := cn.d.Store.GroupList(ctx)
	if err != nil {
		cn.fail(c, err)
		return
	}
	rows := make([]groupRow, 0, len(groups))
	for _, g := range groups {
		srcs, err := cn.d.Store.SourceList(ctx, g.ID)
		if err != nil {
			cn.fail(c, err)
			return
		}
		rows = append(rows, groupRow{ID: g.ID, Name: g.Name, Status: g.Status, Members: len(g.Members), Sources: len(srcs)})
	}
	cn.render(c, 200, "groups", &page{Title: "Groups", Nav: "groups", Data: groupsData{Groups: rows}})
}

// memberRow is a member on its group's page, in the group's order.
type memberRow struct {
	hostState
	ID, Name string
	Position int  // 1 for the first
	Known    bool // the host was found (a member is a host the store knows; false only if it went meanwhile)
}

// groupSource is a group's source: what the host page shows of a host's
// (its public URL built the same way), with its mode.
type groupSource struct {
	shared.Source
	Mode store.GroupMode
}

type groupData struct {
	Group   *store.Group
	Members []memberRow
	Sources []groupSource
	// Deliveries are the group's newest, each with the member that holds
	// it (HostName) and a link to that member's delivery page.
	Deliveries []deliveryRow
	Shown      int // at most this many deliveries are listed
}

// groupDeliveriesShown bounds the recent deliveries on a group's page.
const groupDeliveriesShown = 50

func (cn *Console) groupPage(c *gin.Context) {
	ctx := c.Request.Context()
	g, err := cn.d.Store.GroupGet(ctx, c.Param("id"))
	if errors.Is(err, store.ErrNotFound) {
		cn.failCode(c, shared.CodeNotFound, "No such group.")
		return
	}
	if err != nil {
		cn.fail(c, err)
		return
	}
	hosts, err := cn.d.Store.HostList(ctx)
	if err != nil {
		cn.fail(c, err)
		return
	}
	srcs, err := cn.d.Store.SourceList(ctx, g.ID)
	if err != nil {
		cn.fail(c, err)
		return
	}
	found, err := cn.d.Store.DeliveryFind(ctx, &store.DeliveryFindParams{GroupID: g.ID, Limit: groupDeliveriesShown})
	if err != nil {
		cn.fail(c, err)
		return
	}
	byID := make(map[string]*store.Host, len(hosts))
	for _, h := range hosts {
		byID[h.ID] = h
	}
	names := hostNames(hosts)
	d := groupData{Group: g, Shown: groupDeliveriesShown}
	for i, m := range g.Members {
		r := memberRow{ID: m.HostID, Name: hostName(names, m.HostID), Position: i + 1}
		if h := byID[m.HostID]; h != nil {
			r.hostState, r.Known = cn.stateOf(h), true
		}
		d.Members = append(d.Members, r)
	}
	for _, s := range srcs {
		d.Sources = append(d.Sources, groupSource{Source: cn.d.App.SourceView(c, s), Mode: s.Mode})
	}
	for _, x := range found {
		d.Deliveries = append(d.Deliveries, deliveryRow{Delivery: x, StatusLabel: statusLabel(x.Status),
			Href: deliveryHref(x.HostID, x.ID), HostName: hostName(names, x.HostID)})
	}
	cn.render(c, 200, "group", &page{Title: g.Name, Nav: "groups", Data: d})
}
