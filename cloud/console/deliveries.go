package console

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// deliveriesReader is what the deliveries page reads: the operator's
// find across hosts, the one GET /api/deliveries answers from.
type deliveriesReader interface {
	DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error)
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
	Next       string // the next page's URL; "" on the last
	First      string // the first page's URL; "" on the first
}

// deliveryRow is one delivery of a list.
type deliveryRow struct {
	*store.Delivery
	StatusLabel string
	Href        string
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
		at, id, err := decodeCursor(f.Cursor)
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
	d := &deliveriesData{Filter: f}
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
		next.Cursor = encodeCursor(last.ReceivedAt, last.ID)
		d.Next = "/console/deliveries" + encodeQuery(next.query(true))
	}
	if f.Cursor != "" {
		d.First = "/console/deliveries" + encodeQuery(f.query(false))
	}
	d.Deliveries = make([]deliveryRow, 0, len(ds))
	for _, x := range ds {
		d.Deliveries = append(d.Deliveries, deliveryRow{Delivery: x, StatusLabel: statusLabel(x.Status), Href: deliveryHref(x.HostID, x.ID)})
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

// Cursors are the API's: base64url of "<received unix ms>:<delivery id>".
func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMilli(), 10) + ":" + id))
}

func decodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", err
	}
	ms, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return time.Time{}, "", errors.New("malformed cursor")
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	return time.UnixMilli(n).UTC(), id, nil
}
