package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/shared"
)

func deliveriesList(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "deliveries list [--host H] [--status S] [--source S] [--provider P] [--event-id E] [--correlation-id C] [--since 24h|TIME] [--limit N] [--cursor C] [--json]  (every host's, newest first)")
	hostID := f.String("host", "", "only this host's")
	status := f.String("status", "", "queued, delivering, delivered, acked, retrying or dlq")
	src := f.String("source", "", "only this source")
	provider := f.String("provider", "", "only sources of this provider")
	eventID := f.String("event-id", "", "the provider's event id")
	corr := f.String("correlation-id", "", "the correlation id")
	sinceFlag := f.String("since", "", "received since: a duration (24h) or an RFC 3339 time")
	limit := f.Int("limit", 50, "at most this many (1 to 500)")
	cursor := f.String("cursor", "", "the next page, from a previous --json answer's next_cursor")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	for k, v := range map[string]string{"host": *hostID, "status": *status, "source": *src, "provider": *provider,
		"event_id": *eventID, "correlation_id": *corr, "cursor": *cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *sinceFlag != "" {
		at, err := parseSince(*sinceFlag, e.now())
		if err != nil {
			return err
		}
		q.Set("since", at.Format(time.RFC3339Nano))
	}
	if err := auth(); err != nil {
		return err
	}
	var page deliveryPage
	if done, err := e.fetch(ctx, "GET", "/api/deliveries", q, nil, &page); done {
		return err
	}
	e.deliveryTable(page.Webhooks)
	if page.NextCursor != "" {
		fmt.Fprintf(e.stdout, "more: --cursor %s\n", page.NextCursor)
	}
	return nil
}

func (e *env) deliveryTable(ds []shared.Delivery) { e.deliveryTableTo(e.stdout, ds) }

func (e *env) deliveryTableTo(w io.Writer, ds []shared.Delivery) {
	rows := make([][]string, 0, len(ds))
	for _, d := range ds {
		rows = append(rows, []string{d.DeliveryID, d.HostID, d.Status, fmt.Sprintf("%d/%d", d.Attempts, d.MaxAttempts),
			eventName(d), e.ago(&d.ReceivedAt), orDash(cut(d.LastError, 60))})
	}
	tableTo(w, []string{"DELIVERY", "HOST", "STATUS", "ATTEMPTS", "EVENT", "RECEIVED", "LAST ERROR"}, rows)
}

func eventName(d shared.Delivery) string {
	if d.EventAction != "" {
		return d.EventType + "." + d.EventAction
	}
	return orDash(d.EventType)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseSince reads a duration back from now (24h) or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--since %q: want a duration (24h) or an RFC 3339 time", v)
}

// find finds the deliveries a reference names: a delivery id, else a
// provider's event id, else a correlation id.
func (e *env) find(ctx context.Context, ref string) ([]shared.Delivery, error) {
	var page deliveryPage
	// A delivery id is {source}:{event id}:{received ms}.
	if first, last := strings.Index(ref, ":"), strings.LastIndex(ref, ":"); first >= 0 && last > first {
		if _, err := strconv.ParseInt(ref[last+1:], 10, 64); err == nil {
			q := url.Values{"event_id": {ref[first+1 : last]}, "source": {ref[:first]}, "limit": {"500"}}
			if err := e.client.do(ctx, "GET", "/api/deliveries", q, nil, &page); err != nil {
				return nil, err
			}
			for _, d := range page.Webhooks {
				if d.DeliveryID == ref {
					return []shared.Delivery{d}, nil
				}
			}
		}
	}
	for _, key := range []string{"event_id", "correlation_id"} {
		if err := e.client.do(ctx, "GET", "/api/deliveries", url.Values{key: {ref}, "limit": {"20"}}, nil, &page); err != nil {
			return nil, err
		}
		if len(page.Webhooks) > 0 {
			return page.Webhooks, nil
		}
	}
	return nil, &apiError{Status: 404, Code: "not_found", Message: fmt.Sprintf("no delivery, event id or correlation id %q", ref)}
}

// findOne is find, when the reference must name one delivery.
func (e *env) findOne(ctx context.Context, ref string) (shared.Delivery, error) {
	ds, err := e.find(ctx, ref)
	if err != nil {
		return shared.Delivery{}, err
	}
	if len(ds) > 1 {
		fmt.Fprintf(e.stderr, "%q names %d deliveries:\n", ref, len(ds))
		e.deliveryTableTo(e.stderr, ds)
		return shared.Delivery{}, usagef("%q names several deliveries: give one delivery id", ref)
	}
	return ds[0], nil
}

// deliveryArg reads a command's flags and its one argument, a reference that
// must name one delivery, and finds that delivery.
func (e *env) deliveryArg(ctx context.Context, f *flags, args []string, auth func() error) (shared.Delivery, error) {
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return shared.Delivery{}, err
	}
	return e.findOne(ctx, pos[0])
}

func deliveryPath(d shared.Delivery) string {
	return "/api/hosts/" + url.PathEscape(d.HostID) + "/webhooks/" + url.PathEscape(d.DeliveryID)
}

func deliveriesRetry(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "deliveries retry DELIVERY_ID [--json]  (a dead-lettered or retrying delivery, attempts reset)")
	return e.deliveryAction(ctx, f, args, auth, "retry", func() any { return nil })
}

func deliveriesReplay(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "deliveries replay DELIVERY_ID [--to HOST_ID] [--json]  (a new delivery of a stored one, any status: its body and headers as received, X-Relay-Replay-Of naming it)")
	to := f.String("to", "", "the host to send it to (default: its own host)")
	return e.deliveryAction(ctx, f, args, auth, "replay", func() any {
		if *to == "" {
			return nil
		}
		return map[string]string{"host_id": *to}
	})
}

// deliveryAction is a command that posts to one delivery's action (retry,
// replay) with the body in gives once the flags are read, and prints the
// delivery it answers (with --json, the whole answer).
func (e *env) deliveryAction(ctx context.Context, f *flags, args []string, auth func() error, action string, in func() any) error {
	d, err := e.deliveryArg(ctx, f, args, auth)
	if err != nil {
		return err
	}
	var out map[string]json.RawMessage
	if done, err := e.fetch(ctx, "POST", deliveryPath(d)+"/"+action, nil, in(), &out); done {
		return err
	}
	var got shared.Delivery
	if err := json.Unmarshal(out["delivery"], &got); err != nil {
		return fmt.Errorf("the cloud's answer: %w", err)
	}
	e.deliveryTable([]shared.Delivery{got})
	return nil
}

func deliveriesPurge(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "deliveries purge-dlq HOST_ID [--json]  (deletes the host's dead letters)")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var out struct {
		Purged int `json:"purged"`
	}
	if done, err := e.fetch(ctx, "DELETE", "/api/hosts/"+url.PathEscape(pos[0])+"/webhooks/dlq", nil, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "purged %d dead letters\n", out.Purged)
	return nil
}

func rejections(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "rejections HOST_ID [--limit N] [--cursor C] [--json]")
	limit := f.Int("limit", 100, "at most this many (1 to 500)")
	cursor := f.String("cursor", "", "the next page")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	q := pageQuery(*limit, *cursor)
	var out struct {
		Rejections []struct {
			At       time.Time `json:"at"`
			Source   string    `json:"source"`
			Status   int       `json:"status"`
			Reason   string    `json:"reason"`
			ClientIP string    `json:"client_ip"`
		} `json:"rejections"`
		NextCursor string `json:"next_cursor,omitempty"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/hosts/"+url.PathEscape(pos[0])+"/rejections", q, nil, &out); done {
		return err
	}
	rows := make([][]string, 0, len(out.Rejections))
	for _, r := range out.Rejections {
		rows = append(rows, []string{stamp(&r.At), r.Source, strconv.Itoa(r.Status), r.ClientIP, r.Reason})
	}
	e.table([]string{"AT", "SOURCE", "STATUS", "CLIENT", "REASON"}, rows)
	if out.NextCursor != "" {
		fmt.Fprintf(e.stdout, "more: --cursor %s\n", out.NextCursor)
	}
	return nil
}

func quarantineList(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "quarantine list [--limit N] [--json]")
	limit := f.Int("limit", 100, "at most this many, oldest first")
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	var out struct {
		Count    int `json:"count"`
		Requests []struct {
			ID         int64     `json:"id"`
			HostID     string    `json:"host_id"`
			Source     string    `json:"source"`
			ReceivedAt time.Time `json:"received_at"`
			ClientIP   string    `json:"client_ip"`
			BodySize   int       `json:"body_size"`
			Kind       string    `json:"kind"`
			Reason     string    `json:"reason"`
		} `json:"requests"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/quarantine", url.Values{"limit": {strconv.Itoa(*limit)}}, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "%d requests quarantined (secret: waiting for a key that decrypts their source's secret; replay: held as a suspected replay, released with quarantine release ID)\n", out.Count)
	rows := make([][]string, 0, len(out.Requests))
	for _, r := range out.Requests {
		rows = append(rows, []string{strconv.FormatInt(r.ID, 10), r.Kind, r.HostID, r.Source, stamp(&r.ReceivedAt), r.ClientIP,
			strconv.Itoa(r.BodySize), r.Reason})
	}
	e.table([]string{"ID", "KIND", "HOST", "SOURCE", "RECEIVED", "CLIENT", "BYTES", "REASON"}, rows)
	return nil
}

func quarantineRelease(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "quarantine release [ID] [--json]  (a release pass now; with ID, one held suspected replay delivered)")
	pos, err := f.parseAuthed(args, 0, 1, auth)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		return releaseHeld(ctx, e, pos[0])
	}
	var out struct {
		Admitted int `json:"admitted"`
		Rejected int `json:"rejected"`
		Held     int `json:"held"`
	}
	if done, err := e.fetch(ctx, "POST", "/api/quarantine/release", nil, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "admitted %d, rejected %d, held %d\n", out.Admitted, out.Rejected, out.Held)
	return nil
}

// releaseHeld releases one held suspected replay: delivered past the
// replay guard.
func releaseHeld(ctx context.Context, e *env, id string) error {
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("quarantine release: %q is not a quarantined request's id (see quarantine list)", id)
	}
	var out struct {
		DeliveryID string `json:"delivery_id"`
		Status     string `json:"status"`
	}
	if done, err := e.fetch(ctx, "POST", "/api/quarantine/"+id+"/release", nil, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "released %s: %s %s\n", id, out.Status, out.DeliveryID)
	return nil
}
