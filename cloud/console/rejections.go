package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
)

// rejectionsReader is what the rejections page reads.
type rejectionsReader interface {
	HostList(ctx context.Context) ([]*store.Host, error)
	RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error)
	QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error)
	QuarantineCount(ctx context.Context) (int, error)
}

// rejectionsPageSize is how many rejections, or quarantined requests, a
// page shows.
const rejectionsPageSize = 50

// rejectionsData is what the rejections page shows: one host's refused
// requests, newest first, and the quarantine (every host's), oldest first.
type rejectionsData struct {
	Hosts      []hostLink
	Host       string // the host whose rejections are shown; "" when there is none
	Rejections []*store.Rejection
	Next       string // the next page of rejections; "" on the last
	First      string

	Quarantine      []quarantineRow
	QuarantineCount int
	QuarantineNext  string
	QuarantineFirst string
}

// quarantineRow is a quarantined request as the page lists it: header
// names only, as the API lists them, never their values nor the body.
type quarantineRow struct {
	ID          int64
	HostID      string
	HostName    string
	Source      string
	ReceivedAt  time.Time
	ClientIP    string
	HeaderNames []string
	BodySize    int
}

// loadRejections is the rejections page's data. q holds host (default: the
// first host), cursor (a rejection id) and qafter (a quarantined id).
func loadRejections(ctx context.Context, r rejectionsReader, q url.Values) (*rejectionsData, error) {
	before, err := idParam(q, "cursor")
	if err != nil {
		return nil, err
	}
	after, err := idParam(q, "qafter")
	if err != nil {
		return nil, err
	}
	hosts, err := r.HostList(ctx)
	if err != nil {
		return nil, err
	}
	d := &rejectionsData{Host: q.Get("host")}
	if d.Host == "" && len(hosts) > 0 {
		d.Host = hosts[0].ID
	}
	found := false
	for _, h := range hosts {
		d.Hosts = append(d.Hosts, hostLink{ID: h.ID, Name: h.Name, Href: "/console/rejections?host=" + url.QueryEscape(h.ID), Current: h.ID == d.Host})
		found = found || h.ID == d.Host
	}
	if d.Host != "" && !found {
		return nil, &errFilter{"no such host: " + d.Host}
	}
	base := url.Values{}
	if d.Host != "" {
		base.Set("host", d.Host)
		// One more than the page says whether there is a next page.
		rs, err := r.RejectionList(ctx, &store.RejectionListParams{HostID: d.Host, Limit: rejectionsPageSize + 1, BeforeID: before})
		if err != nil {
			return nil, err
		}
		if len(rs) > rejectionsPageSize {
			rs = rs[:rejectionsPageSize]
			d.Next = pageHref(base, "cursor", rs[len(rs)-1].ID, q.Get("qafter"))
		}
		d.Rejections = rs
		if before > 0 {
			d.First = pageHref(base, "", 0, q.Get("qafter"))
		}
	}

	if d.QuarantineCount, err = r.QuarantineCount(ctx); err != nil {
		return nil, err
	}
	qs, err := r.QuarantineList(ctx, &store.QuarantineListParams{AfterID: after, Limit: rejectionsPageSize + 1})
	if err != nil {
		return nil, err
	}
	if len(qs) > rejectionsPageSize {
		qs = qs[:rejectionsPageSize]
		next := url.Values{}
		for k, v := range base {
			next[k] = v
		}
		if c := q.Get("cursor"); c != "" {
			next.Set("cursor", c)
		}
		next.Set("qafter", strconv.FormatInt(qs[len(qs)-1].ID, 10))
		d.QuarantineNext = "/console/rejections?" + next.Encode() + "#quarantine"
	}
	if after > 0 {
		first := url.Values{}
		for k, v := range base {
			first[k] = v
		}
		d.QuarantineFirst = "/console/rejections" + encodeQuery(first) + "#quarantine"
	}
	for _, x := range qs {
		names := make([]string, 0, len(x.Header))
		for k := range x.Header {
			names = append(names, strings.ToLower(http.CanonicalHeaderKey(k)))
		}
		sort.Strings(names)
		d.Quarantine = append(d.Quarantine, quarantineRow{ID: x.ID, HostID: x.HostID, HostName: hostName(hostNames(hosts), x.HostID), Source: x.Source, ReceivedAt: x.ReceivedAt,
			ClientIP: x.ClientIP, HeaderNames: store.CutHeaderNames(names), BodySize: len(x.Body)})
	}
	return d, nil
}

// pageHref is the rejections page with base's query, key set to id (when
// key is not ""), and the quarantine's page kept.
func pageHref(base url.Values, key string, id int64, qafter string) string {
	q := url.Values{}
	for k, v := range base {
		q[k] = v
	}
	if key != "" {
		q.Set(key, strconv.FormatInt(id, 10))
	}
	if qafter != "" {
		q.Set("qafter", qafter)
	}
	return "/console/rejections" + encodeQuery(q)
}

// idParam reads a positive id cursor; 0 when absent.
func idParam(q url.Values, key string) (int64, error) {
	v := q.Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, &errFilter{key + ": want a positive id"}
	}
	return n, nil
}

func (cn *Console) rejectionsPage(c *gin.Context) {
	d, err := loadRejections(c.Request.Context(), cn.d.Store, c.Request.URL.Query())
	if err != nil {
		cn.failLoad(c, err)
		return
	}
	p := &page{Title: "Rejections", Nav: "rejections", Data: d}
	if v := c.Query("released"); v != "" {
		// Numbers only: the page says nothing a link could make up.
		var a, r, h int
		if _, err := fmt.Sscanf(v, "%d-%d-%d", &a, &r, &h); err == nil {
			p.Flash = fmt.Sprintf("Release pass done: %d admitted, %d rejected, %d still held.", a, r, h)
		}
	}
	cn.render(c, 200, "rejections", p)
}

// release runs a quarantine release pass now, as POST
// /api/quarantine/release does.
func (cn *Console) release(c *gin.Context) {
	ops, ok := cn.ops(c)
	if !ok {
		return
	}
	res, err := ops.ReleaseQuarantine(c.Request.Context())
	if err != nil {
		cn.fail(c, err)
		return
	}
	c.Redirect(303, fmt.Sprintf("%s/rejections?released=%d-%d-%d#quarantine", Path, res.Admitted, res.Rejected, res.Held))
}
