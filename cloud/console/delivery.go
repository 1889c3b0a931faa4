package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// deliveryReader is what a delivery's page reads: what `cloud ctl
// inspect` gathers (the delivery with its body, its audit trail, the
// result its host reported).
type deliveryReader interface {
	DeliveryGet(ctx context.Context, hostID, id string) (*store.Delivery, error)
	DeliveryEventList(ctx context.Context, deliveryID string) ([]*store.DeliveryEvent, error)
	DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error)
}

// maxShownBody is how much of a body the page shows; the rest is cut (the
// API's GET of the delivery has it whole).
const maxShownBody = 256 << 10

// deliveryData is what a delivery's page shows. Every string in it is
// text: the template escapes it.
type deliveryData struct {
	D           *store.Delivery
	StatusLabel string
	Headers     []header
	// Body is the body to show: indented JSON when it is JSON and Raw is
	// not asked, else as received (invalid UTF-8 replaced).
	Body      string
	IsJSON    bool // the body is JSON (a raw/pretty toggle applies)
	Raw       bool // the raw body was asked (?raw=1)
	BodyCut   bool // the body is longer than maxShownBody
	Timeline  []timelineEntry
	Result    *store.DeliveryResult // nil: the host reported none
	CanRetry  bool                  // dead-lettered or retrying
	Href      string
	RawHref   string
	PrettyRef string
	Retried   bool // it was just retried (the redirect after the retry says so)
	// Next is what an operator can do about it, as `cloud ctl inspect`
	// and the API say (delivery.Advise).
	Next shared.NextAction
	// ReplayOf is the delivery this one replays ("": none), ReplayOfHref
	// its page; Replays are the replays made of this one.
	ReplayOf *replayLink
	Replays  []replayLink
}

type replayLink struct{ ID, HostID, Href string }

type header struct{ Name, Value string }

// timelineEntry is one audit event, with the time since the one before.
type timelineEntry struct {
	*store.DeliveryEvent
	FromLabel, ToLabel string
	After              string // "" for the first
}

// loadDelivery is a delivery's page data, or store.ErrNotFound.
func loadDelivery(ctx context.Context, r deliveryReader, hostID, id string, raw bool, now time.Time) (*deliveryData, error) {
	d, err := r.DeliveryGet(ctx, hostID, id)
	if err != nil {
		return nil, err
	}
	evs, err := r.DeliveryEventList(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	res, err := r.DeliveryResultGet(ctx, d.ID)
	if errors.Is(err, store.ErrNotFound) {
		res, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	href := deliveryHref(d.HostID, d.ID)
	out := &deliveryData{D: d, StatusLabel: statusLabel(d.Status), Result: res, Raw: raw,
		CanRetry: store.TransitionRetry.Allows(d.Status), Href: href, RawHref: href + "?raw=1", PrettyRef: href}
	for k, v := range d.Headers {
		out.Headers = append(out.Headers, header{k, v})
	}
	sort.Slice(out.Headers, func(i, j int) bool { return out.Headers[i].Name < out.Headers[j].Name })
	out.Body, out.IsJSON, out.BodyCut = showBody(d.RawBody, raw)
	out.Next = delivery.Advise(d, evs, res, now)
	if of, ok := delivery.ReplayOf(evs); ok {
		out.ReplayOf = &replayLink{ID: of.ID, HostID: of.HostID, Href: deliveryHref(of.HostID, of.ID)}
	}
	for _, r := range delivery.Replays(evs) {
		out.Replays = append(out.Replays, replayLink{ID: r.ID, HostID: r.HostID, Href: deliveryHref(r.HostID, r.ID)})
	}
	var prev time.Time
	for i, e := range evs {
		t := timelineEntry{DeliveryEvent: e, FromLabel: statusLabel(e.From), ToLabel: statusLabel(e.To)}
		if e.From == "" {
			t.FromLabel = ""
		}
		if i > 0 {
			t.After = "+" + e.At.Sub(prev).Round(time.Millisecond).String()
		}
		prev = e.At
		out.Timeline = append(out.Timeline, t)
	}
	return out, nil
}

// showBody is a body as the page shows it: JSON indented unless raw,
// anything else as text, at most maxShownBody bytes of it.
func showBody(b []byte, raw bool) (body string, isJSON, cut bool) {
	isJSON = json.Valid(b)
	if isJSON && !raw && len(b) <= maxShownBody {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil && out.Len() <= maxShownBody {
			return out.String(), true, false
		}
	}
	if len(b) > maxShownBody {
		b, cut = b[:maxShownBody], true // a rune cut in two shows as U+FFFD
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD"))), isJSON, cut
}

func (cn *Console) deliveryPage(c *gin.Context) {
	hostID, id := c.Param("id"), strings.TrimPrefix(c.Param("delivery"), "/")
	d, err := loadDelivery(c.Request.Context(), cn.d.Store, hostID, id, c.Query("raw") == "1", cn.now())
	if errors.Is(err, store.ErrNotFound) {
		cn.failCode(c, shared.CodeNotFound, "no such delivery on this host")
		return
	}
	if err != nil {
		cn.fail(c, err)
		return
	}
	p := &page{Title: "Delivery " + d.D.EventID, Nav: "deliveries", Data: d}
	if c.Query("retried") == "1" {
		p.Flash = "Retried: it is queued again, with its attempts reset; the host gets it next, over its socket or with its next heartbeat."
	}
	if c.Query("replayed") == "1" {
		p.Flash = "Replayed: this is a new delivery of the same body and headers, queued for its host, which runs it as new work."
	}
	cn.render(c, 200, "delivery", p)
}

// replay makes a new delivery of a stored one, to its host or the one the
// form names, as POST /api/hosts/:id/webhooks/:deliveryId/replay does, and
// shows the new one.
func (cn *Console) replay(c *gin.Context) {
	ops, ok := cn.ops(c)
	if !ok {
		return
	}
	d, err := ops.ReplayDelivery(c.Request.Context(), c.PostForm("host"), c.PostForm("id"), strings.TrimSpace(c.PostForm("to")))
	if err != nil {
		cn.fail(c, err)
		return
	}
	c.Redirect(303, deliveryHref(d.HostID, d.ID)+"?replayed=1")
}

// retry puts a dead-lettered or retrying delivery back in the queue, as
// POST /api/hosts/:id/webhooks/:deliveryId/retry does.
func (cn *Console) retry(c *gin.Context) {
	ops, ok := cn.ops(c)
	if !ok {
		return
	}
	d, err := ops.RetryDelivery(c.Request.Context(), c.PostForm("host"), c.PostForm("id"))
	if err != nil {
		cn.fail(c, err)
		return
	}
	c.Redirect(303, deliveryHref(d.HostID, d.ID)+"?retried=1")
}
