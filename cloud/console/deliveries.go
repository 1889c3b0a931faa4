package console

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// deliveriesReader is what the deliveries page reads: the operator's
// find across hosts, the one GET /api/deliveries answers from.
type deliveriesReader interface {
	DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error)
	HostList(ctx context.Context) ([]*store.Host, error)
}

// deliveriesPageSize is how many deliveries a page shows.
const deliveriesPageSize = 50

// statusLabels name the store's statuses as an operator reads them.
var statusLabels = map[store.Status]string{
	store.StatusQueued:     "pending",
	store.StatusDelivering: "leased",
	store.StatusDelivered:  "delivered, awaiting ack",
	store.StatusAcked:      "acked",
	store.StatusRetrying:   "failed, retrying",
	store.StatusDLQ:        "dead-lettered",
}

// statusLabel is a status as the pages name it.
func statusLabel(s store.Status) string {
	if l, ok := statusLabels[s]; ok {
		return l
	}
	return string(s)
}

// deliveryFilter is the deliveries page's query, as the operator typed it.
type deliveryFilter struct {
	Host, Status, Source, Provider, EventID string
	Since, Until                            string // 2006-01-02T15:04 (UTC) or RFC 3339
	Cursor                                  string
}

// query is the filter as a URL query (the cursor left out unless withCursor).
func (f deliveryFilter) query(withCursor bool) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"host": f.Host, "status": f.Status, "source": f.Source,
		"provider": f.Provider, "event_id": f.EventID, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if withCursor && f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	return q
}

// statusTab is one status the page filters by.
type statusTab struct {
	Label, Href string
	Current     bool
}

// deliveriesData is what the deliveries page shows.
type deliveriesData struct {
	Filter     deliveryFilter
	Tabs       []statusTab
	Deliveries []deliveryRow
	Hosts      []hostLink
	Next       string // the next page's URL; "" on the last
	First      string // the first page's URL; "" on the first
	PurgeHref  string // the confirmation of a purge of the host's dead letters, when they are shown
}

// deliveryRow is one delivery of a list.
type deliveryRow struct {
	*store.Delivery
	StatusLabel string
	Href        string
	HostName    string // the host's name, its id when it has none
}

// hostNames maps each host's id to its name, for lists that show hosts by
// name (a host without one by its id).
func hostNames(hosts []*store.Host) map[string]string {
	names := make(map[string]string, len(hosts))
	for _, h := range hosts {
		names[h.ID] = h.Name
	}
	return names
}

// hostName is the name a list shows for hostID.
func hostName(names map[string]string, hostID string) string {
	if n := names[hostID]; n != "" {
		return n
	}
	return hostID
}

// errFilter is a filter the page cannot read; its message says why.
type errFilter struct{ msg string }

func (e *errFilter) Error() string { return e.msg }

// parseDeliveryFilter reads the page's query into the store's find. A
// time without a zone is UTC; "until" is a keyset bound (received before
// it), the cursor one further back.
func parseDeliveryFilter(q url.Values) (deliveryFilter, *store.DeliveryFindParams, error) {
	f := deliveryFilter{
		Host: strings.TrimSpace(q.Get("host")), Status: q.Get("status"), Source: strings.TrimSpace(q.Get("source")),
		Provider: strings.TrimSpace(q.Get("provider")), EventID: strings.TrimSpace(q.Get("event_id")),
		Since: strings.TrimSpace(q.Get("since")), Until: strings.TrimSpace(q.Get("until")), Cursor: q.Get("cursor"),
	}
	p := &store.DeliveryFindParams{HostID: f.Host, Source: f.Source, Provider: f.Provider, EventID: f.EventID, Limit: deliveriesPageSize + 1}
	for _, v := range []string{f.Host, f.Source, f.Provider, f.EventID} {
		if len(v) > 500 {
			return f, nil, &errFilter{"a filter is at most 500 characters"}
		}
	}
	if f.Status != "" {
		st, err := store.ParseStatus(f.Status)
		if err != nil {
			return f, nil, &errFilter{"status: " + err.Error()}
		}
		p.Status = st
	}
	if f.Since != "" {
		at, err := parseFormTime(f.Since)
		if err != nil {
			return f, nil, &errFilter{"since: " + err.Error()}
		}
		p.ReceivedSince = &at
	}
	if f.Until != "" {
		at, err := parseFormTime(f.Until)
		if err != nil {
			return f, nil, &errFilter{"until: " + err.Error()}
		}
		p.BeforeReceivedAt = &at // before (at, ""): received before at
	}
	if f.Cursor != "" {
		at, id, err := server.DecodeCursor(f.Cursor) // the API's cursors
		if err != nil {
			return f, nil, &errFilter{"cursor: not one this page made"}
		}
		p.BeforeReceivedAt, p.BeforeID = &at, id
	}
	return f, p, nil
}

// parseFormTime reads a datetime-local input's value (UTC) or RFC 3339.
func parseFormTime(v string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("want a time such as 2026-11-25T09:00 (UTC) or 2026-11-25T09:00:00Z")
}

// loadDeliveries is the deliveries page's data: one page of the find,
// newest first, read with one more than it shows to know whether a next
// page exists.
func loadDeliveries(ctx context.Context, r deliveriesReader, q url.Values) (*deliveriesData, error) {
	f, p, err := parseDeliveryFilter(q)
	if err != nil {
		return nil, err
	}
	ds, err := r.DeliveryFind(ctx, p)
	if err != nil {
		return nil, err
	}
	hosts, err := r.HostList(ctx)
	if err != nil {
		return nil, err
	}
	d := &deliveriesData{Filter: f}
	for _, h := range hosts {
		d.Hosts = append(d.Hosts, hostLink{ID: h.ID, Name: h.Name, Current: h.ID == f.Host})
	}
	if f.Host != "" && p.Status == store.StatusDLQ {
		d.PurgeHref = "/console/hosts/" + url.PathEscape(f.Host) + "/dlq/purge"
	}
	all := f
	all.Status = ""
	d.Tabs = append(d.Tabs, statusTab{Label: "all", Href: "/console/deliveries" + encodeQuery(all.query(false)), Current: f.Status == ""})
	for _, st := range store.Statuses {
		t := f
		t.Status = string(st)
		d.Tabs = append(d.Tabs, statusTab{Label: statusLabel(st), Href: "/console/deliveries" + encodeQuery(t.query(false)), Current: f.Status == string(st)})
	}
	if len(ds) > deliveriesPageSize {
		ds = ds[:deliveriesPageSize]
		last := ds[len(ds)-1]
		next := f
		next.Cursor = server.EncodeCursor(last.ReceivedAt, last.ID)
		d.Next = "/console/deliveries" + encodeQuery(next.query(true))
	}
	if f.Cursor != "" {
		d.First = "/console/deliveries" + encodeQuery(f.query(false))
	}
	d.Deliveries = make([]deliveryRow, 0, len(ds))
	names := hostNames(hosts)
	for _, x := range ds {
		d.Deliveries = append(d.Deliveries, deliveryRow{Delivery: x, StatusLabel: statusLabel(x.Status), Href: deliveryHref(x.HostID, x.ID),
			HostName: hostName(names, x.HostID)})
	}
	return d, nil
}

// deliveryHref is a delivery's page.
func deliveryHref(hostID, id string) string {
	return "/console/hosts/" + url.PathEscape(hostID) + "/deliveries/" + url.PathEscape(id)
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// deliveryOps is what the deliveries pages change, through the admin
// API's own functions (cloud/server's Server).
type deliveryOps interface {
	RetryDelivery(ctx context.Context, hostID, id string) (*store.Delivery, error)
	ReplayDelivery(ctx context.Context, hostID, id, toHostID string) (*store.Delivery, error)
	PurgeDLQ(ctx context.Context, hostID string) (int, error)
	ReleaseQuarantine(ctx context.Context) (intake.ReleaseResult, error)
}

// ops is the App's deliveryOps (cloud/server's Server has them all).
func (cn *Console) ops(c *gin.Context) (deliveryOps, bool) {
	ops, ok := cn.d.App.(deliveryOps)
	if !ok {
		cn.failCode(c, shared.CodeNotImplemented, "this console cannot change deliveries")
	}
	return ops, ok
}

// deliveryRoutes registers the deliveries, volume and rejections pages on
// the console's logged-in group.
func (cn *Console) deliveryRoutes(a gin.IRouter) {
	a.GET("/deliveries", cn.deliveriesPage)
	a.POST("/deliveries/retry", cn.checkCSRF, cn.retry)
	a.POST("/deliveries/replay", cn.checkCSRF, cn.replay)
	// The catch-all keeps a delivery id with a slash in it whole.
	a.GET("/hosts/:id/deliveries/*delivery", cn.deliveryPage)
	a.GET("/hosts/:id/dlq/purge", cn.purgePage)
	a.POST("/hosts/:id/dlq/purge", cn.checkCSRF, cn.purge)
	a.GET("/volume", cn.volumePage)
	a.GET("/rejections", cn.rejectionsPage)
	a.POST("/quarantine/release", cn.checkCSRF, cn.release)
}

// failLoad answers an error of a page's data: a filter the page cannot
// read is the operator's to fix (400, saying why).
func (cn *Console) failLoad(c *gin.Context, err error) {
	var fe *errFilter
	if errors.As(err, &fe) {
		cn.failCode(c, shared.CodeInvalid, fe.msg)
		return
	}
	cn.fail(c, err)
}

func (cn *Console) deliveriesPage(c *gin.Context) {
	d, err := loadDeliveries(c.Request.Context(), cn.d.Store, c.Request.URL.Query())
	if err != nil {
		cn.failLoad(c, err)
		return
	}
	p := &page{Title: "Deliveries", Nav: "deliveries", Data: d}
	if d.Filter.Status == string(store.StatusDLQ) {
		p.Title, p.Nav = "Dead letters", "dead-letters"
	}
	if n, err := strconv.Atoi(c.Query("purged")); err == nil && n >= 0 {
		p.Flash = "Purged " + formatCount(n) + " dead letter" + plural(n) + "."
	}
	cn.render(c, 200, "deliveries", p)
}

// purgeData is the purge confirmation's.
type purgeData struct {
	HostID, HostName string
	Count            int
}

// purgePage asks to confirm a purge of a host's dead-letter queue.
func (cn *Console) purgePage(c *gin.Context) {
	h, counts, ok := cn.hostCounted(c)
	if !ok {
		return
	}
	cn.render(c, 200, "purge", &page{Title: "Purge dead letters", Nav: "dead-letters",
		Data: purgeData{HostID: h.ID, HostName: h.Name, Count: counts[store.StatusDLQ]}})
}

// purge deletes a host's dead letters, once confirmed, as DELETE
// /api/hosts/:id/webhooks/dlq does.
func (cn *Console) purge(c *gin.Context) {
	if c.PostForm("confirm") != "yes" {
		cn.failCode(c, shared.CodeInvalid, "confirm the purge from its page")
		return
	}
	ops, ok := cn.ops(c)
	if !ok {
		return
	}
	hostID := c.Param("id")
	n, err := ops.PurgeDLQ(c.Request.Context(), hostID)
	if err != nil {
		cn.fail(c, err)
		return
	}
	q := url.Values{"status": {string(store.StatusDLQ)}, "host": {hostID}, "purged": {strconv.Itoa(n)}}
	c.Redirect(303, Path+"/deliveries?"+q.Encode())
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
