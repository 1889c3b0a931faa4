package console

import (
	"fmt"
	"html/template"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// hostRow is a line of the hosts page.
type hostRow struct {
	hostState
	ID, Name      string
	Pending       int
	OldestPending *time.Time
	PendingFor    time.Duration // age of the oldest pending
	DLQ           int
	Spark         template.HTML // the last 24 hours' webhooks; "" when unknown
	SparkTotal    int
}

type hostsData struct {
	Hosts []hostRow
	Next  string // the next page's URL; "" on the last
	First string // the first page's URL; "" on the first
}

// hostsPageSize is how many hosts a page of the hosts page shows.
const hostsPageSize = 100

// hostsPage shows a page of the hosts, oldest first: each one's presence,
// what waits for it (its counts kept, the oldest of them) and its last
// day's webhooks.
func (cn *Console) hostsPage(c *gin.Context) {
	ctx := c.Request.Context()
	p := &store.HostPageParams{Limit: hostsPageSize + 1}
	if v := c.Query("cursor"); v != "" {
		at, id, err := server.DecodeCursor(v)
		if err != nil {
			cn.failCode(c, shared.CodeInvalid, "cursor: not one this page made")
			return
		}
		p.AfterCreatedAt, p.AfterID = &at, id
	}
	hosts, err := cn.d.Store.HostListWithCounts(ctx, p)
	if err != nil {
		cn.fail(c, err)
		return
	}
	var d hostsData
	if len(hosts) > hostsPageSize {
		hosts = hosts[:hostsPageSize]
		last := hosts[len(hosts)-1].Host
		d.Next = "/console/?cursor=" + server.EncodeCursor(last.CreatedAt, last.ID)
	}
	if p.AfterCreatedAt != nil {
		d.First = "/console/"
	}
	ids := make([]string, 0, len(hosts))
	for _, h := range hosts {
		ids = append(ids, h.Host.ID)
	}
	backlog, err := cn.d.Store.BacklogByHost(ctx, &store.BacklogParams{DLQSince: cn.now(), Limit: len(ids) + 1, HostIDs: ids})
	if err != nil {
		cn.fail(c, err)
		return
	}
	byHost := make(map[string]*store.HostBacklog, len(backlog))
	for _, b := range backlog {
		byHost[b.HostID] = b
	}
	now := cn.now()
	var volume map[string][]int
	if cn.d.Volume != nil {
		if volume, err = cn.d.Volume(ctx, now, ids); err != nil {
			cn.fail(c, err)
			return
		}
	}
	d.Hosts = make([]hostRow, 0, len(hosts))
	for _, hc := range hosts {
		h := hc.Host
		r := hostRow{hostState: cn.stateOf(h), ID: h.ID, Name: h.Name}
		if b := byHost[h.ID]; b != nil { // what waits, as the store's backlog counts it
			r.Pending, r.OldestPending, r.DLQ = b.Pending, b.OldestPending, b.DLQ
			if b.OldestPending != nil {
				r.PendingFor = now.Sub(*b.OldestPending)
			}
		}
		if volume != nil {
			counts := volume[h.ID]
			if counts == nil {
				counts = make([]int, store.MaxVolumeHours)
			}
			for _, n := range counts {
				r.SparkTotal += n
			}
			r.Spark = Sparkline(counts, fmt.Sprintf("%d webhooks in the last 24 hours", r.SparkTotal))
		}
		d.Hosts = append(d.Hosts, r)
	}
	cn.render(c, 200, "hosts", &page{Title: "Hosts", Nav: "hosts", Data: d})
}

type claimData struct {
	HostID, Name string
	CloudURL     string
	ClaimCode    string
	ExpiresAt    time.Time
	New          bool // a new host, else a new code for an existing one
}

// createHost registers a host and shows its claim code. The page is the
// POST's answer, not a redirect: the code is shown once and kept nowhere.
func (cn *Console) createHost(c *gin.Context) {
	out, err := cn.d.App.CreateHost(c.Request.Context(), c.Request.PostForm.Get("name"))
	if err != nil {
		cn.fail(c, err)
		return
	}
	cn.render(c, 201, "claimcode", &page{Title: "Host created", Nav: "hosts",
		Data: claimData{CloudURL: cn.d.App.PublicURL(c), HostID: out.ID, Name: out.Name, ClaimCode: out.ClaimCode, ExpiresAt: out.ClaimExpiresAt, New: true}})
}

func (cn *Console) newClaimCode(c *gin.Context) {
	out, err := cn.d.App.NewClaimCode(c.Request.Context(), c.Param("id"))
	if err != nil {
		cn.fail(c, err)
		return
	}
	cn.render(c, 200, "claimcode", &page{Title: "New claim code", Nav: "hosts",
		Data: claimData{CloudURL: cn.d.App.PublicURL(c), HostID: out.ID, Name: out.Name, ClaimCode: out.ClaimCode, ExpiresAt: out.ClaimExpiresAt}})
}
