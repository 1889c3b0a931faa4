package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/shared"
)

// inspection is a webhook's whole life, as inspect prints it.
type inspection struct {
	Delivery   shared.Delivery    `json:"delivery"`
	Events     []event            `json:"events"`
	HostResult *shared.HostResult `json:"host_result"`
	Edge       string             `json:"edge"`
	Lease      string             `json:"lease,omitempty"`
	Replays    []string           `json:"replays"`
	// NextAction is the cloud's (delivery.Advise), as the API gives it.
	NextAction shared.NextAction `json:"next_action"`
}

func inspect(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "inspect ID [--json]  (ID: a delivery id, a provider event id or a correlation id)")
	d, err := e.deliveryArg(ctx, f, args, auth)
	if err != nil {
		return err
	}
	var out inspection
	if err := e.client.do(ctx, "GET", deliveryPath(d), nil, nil, &out); err != nil {
		return err
	}
	out.Delivery.HostID = d.HostID
	// inspect shows a webhook's life, not its content: the body and headers
	// the one-delivery answer carries stay out of it.
	out.Delivery.Headers, out.Delivery.RawBody = nil, nil
	now := e.now()
	out.Edge = edgeVerdict(out.Events)
	out.Lease = leaseLine(out.Delivery, now)
	if e.json {
		return e.printJSON(out)
	}
	e.printInspection(out)
	return nil
}

// edgeVerdict is what the public edge made of the request: a stored
// delivery passed its signature check; the first event says how it came in.
func edgeVerdict(evs []event) string {
	for _, ev := range evs {
		if ev.From == "" {
			return "signature verified, stored: " + ev.Reason + " at " + stamp(&ev.At)
		}
	}
	return "signature verified, stored"
}

// leaseLine says whether the delivery is under a lease and until when.
func leaseLine(d shared.Delivery, now time.Time) string {
	if d.LeaseExpires == nil {
		return ""
	}
	if d.LeaseExpires.After(now) {
		return "claimed_until " + stamp(d.LeaseExpires) + " (expires " + since(now, *d.LeaseExpires) + ")"
	}
	return "claimed_until " + stamp(d.LeaseExpires) + " (expired " + since(now, *d.LeaseExpires) + ")"
}

func (e *env) printInspection(in inspection) {
	d := in.Delivery
	w := e.stdout
	fmt.Fprintf(w, "delivery     %s\n", d.DeliveryID)
	fmt.Fprintf(w, "host         %s   source %s   event %s (%s)\n", d.HostID, d.Source, eventName(d), d.EventID)
	fmt.Fprintf(w, "correlation  %s\n", orDash(d.CorrelationID))
	if d.ReplayOf != "" {
		fmt.Fprintf(w, "replay of    %s\n", d.ReplayOf)
	}
	for _, id := range in.Replays {
		fmt.Fprintf(w, "replayed as  %s\n", id)
	}
	fmt.Fprintf(w, "edge         %s\n", in.Edge)
	fmt.Fprintf(w, "status       %s, attempt %d of %d\n", d.Status, d.Attempts, d.MaxAttempts)
	if in.Lease != "" {
		fmt.Fprintf(w, "lease        %s\n", in.Lease)
	}
	if d.NextRetryAt != nil {
		fmt.Fprintf(w, "next retry   %s (%s)\n", stamp(d.NextRetryAt), since(e.now(), *d.NextRetryAt))
	}
	if d.LastError != "" {
		fmt.Fprintf(w, "last error   %s\n", d.LastError)
	}
	if r := in.HostResult; r != nil {
		detail := []string{"handler " + orDash(r.Handler), strconv.FormatInt(r.DurationMS, 10) + " ms"}
		if r.ResponseStatus != nil {
			detail = append(detail, "HTTP "+strconv.Itoa(*r.ResponseStatus))
		}
		if r.ExitCode != nil {
			detail = append(detail, "exit "+strconv.Itoa(*r.ExitCode))
		}
		if r.Error != "" {
			detail = append(detail, "error: "+r.Error)
		}
		fmt.Fprintf(w, "host ledger  %s at attempt %d, reported %s (%s)\n", r.Result, r.Attempt, stamp(&r.ReportedAt), strings.Join(detail, ", "))
	} else {
		fmt.Fprintf(w, "host ledger  no result reported\n")
	}
	fmt.Fprintln(w, "\ntrail")
	rows := make([][]string, 0, len(in.Events))
	for _, ev := range in.Events {
		rows = append(rows, []string{stamp(&ev.At), strconv.Itoa(ev.Attempt), orDash(ev.From) + " → " + ev.To, ev.Reason})
	}
	e.table([]string{"  AT", "ATTEMPT", "TRANSITION", "REASON"}, indent(rows))
	fmt.Fprintf(w, "\nnext_action  %s\n", in.NextAction)
}

func indent(rows [][]string) [][]string {
	for _, r := range rows {
		r[0] = "  " + r[0]
	}
	return rows
}

// tailPage is how many events tail asks for at once; tailLag how far back
// each poll looks again for events that committed late.
const (
	tailPage = 500
	tailLag  = 200
)

func tail(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "tail [--host H] [--last N] [--interval 1s] [--json]  (until interrupted)")
	hostID := f.String("host", "", "only this host's deliveries")
	last := f.Int("last", 10, "start with the last N transitions (0: only new ones)")
	interval := f.Duration("interval", time.Second, "how often to ask the cloud")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *interval < 100*time.Millisecond || *last < 0 || *last > 500 {
		return usagef("tail: --interval at least 100ms, --last from 0 to 500")
	}
	if err := auth(); err != nil {
		return err
	}
	var page struct {
		Events    []event `json:"events"`
		NextAfter int64   `json:"next_after"`
	}
	q := url.Values{"last": {strconv.Itoa(max(*last, 1))}}
	if err := e.client.do(ctx, "GET", "/api/events", q, nil, &page); err != nil {
		return err
	}
	// Events at or below floor were there before tail started: not shown
	// unless asked for with --last.
	floor := page.NextAfter
	if *last == 0 {
		page.Events = nil
	} else if len(page.Events) > 0 {
		floor = page.Events[0].ID - 1
	}
	ticker := time.NewTicker(*interval)
	defer ticker.Stop()
	// Event ids are handed out before their transaction commits, so an event
	// may show up after one with a higher id: each poll reads again from
	// tailLag ids back, and prints what it has not printed yet.
	seen := map[int64]bool{}
	high := page.NextAfter
	for {
		for _, ev := range page.Events {
			if seen[ev.ID] || ev.ID <= floor {
				continue
			}
			seen[ev.ID], high = true, max(high, ev.ID)
			if *hostID != "" && ev.HostID != *hostID {
				continue
			}
			if e.json { // one object a line
				if err := json.NewEncoder(e.stdout).Encode(ev); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(e.stdout, "%s  %s  %s  %s → %s  attempt %d  %s\n", stamp(&ev.At), ev.HostID, ev.DeliveryID, orDash(ev.From), ev.To, ev.Attempt, ev.Reason)
		}
		for id := range seen {
			if id <= high-tailLag {
				delete(seen, id)
			}
		}
		if len(page.Events) < tailPage {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
			}
		}
		after := page.NextAfter
		if len(page.Events) < tailPage {
			after = max(0, high-tailLag)
		}
		page.Events = nil
		err := e.client.do(ctx, "GET", "/api/events", url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(tailPage)}}, nil, &page)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "cloud ctl tail: %v (trying again)\n", err)
			page.NextAfter = after
		}
	}
}
