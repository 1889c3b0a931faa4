package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// cloudDelivery is a delivery as the admin API lists it.
type cloudDelivery struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
	LastError  string `json:"last_error"`
}

// cloudDeliveries lists every delivery of a host, following cursors.
func cloudDeliveries(ctx context.Context, base, hostID string) ([]cloudDelivery, error) {
	var all []cloudDelivery
	cursor := ""
	for {
		var page struct {
			Webhooks   []cloudDelivery `json:"webhooks"`
			NextCursor string          `json:"next_cursor"`
		}
		q := "?limit=500"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := admin(ctx, base, "GET", "/api/hosts/"+hostID+"/webhooks"+q, nil, &page, 200); err != nil {
			return nil, err
		}
		all = append(all, page.Webhooks...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// ledgerRow is a host ledger row as `host ledger list --json` prints it.
type ledgerRow struct {
	DeliveryID   string `json:"delivery_id"`
	Result       string `json:"result"`
	Attempts     int    `json:"attempts"`
	CloudAttempt int    `json:"cloud_attempt"`
	Error        string `json:"error"`
}

// ledgerRows reads a host's whole ledger with `host ledger list --json`
// (read-only; the host may be running or not).
func (e *env) ledgerRows(ctx context.Context, state string) ([]ledgerRow, error) {
	var all []ledgerRow
	cursor := ""
	for {
		args := []string{"ledger", "list", "--json", "--limit", "500", "--state", state}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "host"), args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("host ledger list: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		var page struct {
			Entries    []ledgerRow `json:"entries"`
			NextCursor string      `json:"next_cursor"`
		}
		if err := json.Unmarshal(out, &page); err != nil {
			return nil, fmt.Errorf("host ledger list: %w", err)
		}
		all = append(all, page.Entries...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// checkOpts tunes the comparison to a scenario.
type checkOpts struct {
	// explain says why a delivery reached its host's handler more than once
	// in a way the relay allows (the at-least-once window: the host died, or
	// could not record the outcome, after the handler ran); "" means it is
	// not explained, a duplicate.
	explain func(h *relayHost, key string, arrivals []arrival) string
	// allowDLQ accepts a dead-lettered delivery that carries a reason.
	allowDLQ bool
}

// findings collects the failures of a comparison by kind, with the events.
type findings struct {
	byKind map[string][]string
	order  []string
}

func (f *findings) add(kind, item string) {
	if f.byKind == nil {
		f.byKind = map[string][]string{}
	}
	if _, ok := f.byKind[kind]; !ok {
		f.order = append(f.order, kind)
	}
	f.byKind[kind] = append(f.byKind[kind], item)
}

// into writes one failure line per kind, naming up to 15 events.
func (f *findings) into(r *result) {
	for _, kind := range f.order {
		items := f.byKind[kind]
		sort.Strings(items)
		shown := items
		if len(shown) > 15 {
			shown = shown[:15]
		}
		more := ""
		if len(items) > len(shown) {
			more = fmt.Sprintf(" … and %d more", len(items)-len(shown))
		}
		r.failf("%s (%d): %s%s", kind, len(items), strings.Join(shown, ", "), more)
	}
}

// compare checks the four records — the sender's 2xx log, the cloud's
// deliveries (read from base), each host's ledger and each receiver's log —
// against each other and adds the failures and key figures to r.
func (e *env) compare(ctx context.Context, r *result, base string, s *sender, hosts []*relayHost, opts checkOpts) {
	var f findings
	// The sender's view: which events got a 2xx, and the delivery each
	// answer named.
	events := map[string]*sendRecord{} // event id → record
	okDelivery := map[string]string{}  // event id → its delivery id (from the 2xx answers)
	sent, ok, retried, gaveUp := 0, 0, 0, 0
	for _, rec := range s.records {
		if rec.tries == 0 {
			continue
		}
		sent++
		events[rec.eventID] = rec
		if rec.tries > 1 {
			retried++
		}
		if !rec.ok {
			gaveUp++
			continue
		}
		ok++
		ids := map[string]bool{}
		for _, a := range rec.answers {
			ids[a.DeliveryID] = true
			if a.Status != "queued" && a.Status != "duplicate" {
				f.add("2xx answer that did not store the event", fmt.Sprintf("%s (%q)", rec.eventID, a.Status))
			}
		}
		if len(ids) != 1 {
			f.add("2xx answers naming different deliveries", rec.eventID)
		}
		okDelivery[rec.eventID] = rec.answers[0].DeliveryID
	}
	if gaveUp > 0 {
		var ids []string
		for _, rec := range s.records {
			if rec.tries > 0 && !rec.ok {
				ids = append(ids, fmt.Sprintf("%s (%d tries, last: %s)", rec.eventID, rec.tries, rec.lastFail))
			}
		}
		f.add("events the sender gave up on (no 2xx before the deadline)", strings.Join(ids, "; "))
	}
	deliveryEvent := map[string]string{} // delivery id → event id, for every stored delivery of every host
	deliveryHost := map[string]*relayHost{}

	// The cloud's view.
	cloud := map[string]map[string]cloudDelivery{} // host id → delivery id → delivery
	attemptsOver1, dlq := 0, 0
	for _, h := range hosts {
		ds, err := cloudDeliveries(ctx, base, h.id)
		if err != nil {
			r.failf("cloud deliveries of %s: %v", h.name, err)
			return
		}
		byEvent := map[string][]string{}
		cloud[h.id] = map[string]cloudDelivery{}
		for _, d := range ds {
			cloud[h.id][d.DeliveryID] = d
			deliveryEvent[d.DeliveryID] = d.EventID
			deliveryHost[d.DeliveryID] = h
			byEvent[d.EventID] = append(byEvent[d.EventID], d.DeliveryID)
			if d.Attempts > 1 {
				attemptsOver1++
			}
			rec := events[d.EventID]
			switch {
			case rec == nil:
				f.add("cloud delivery of an event never sent", d.DeliveryID)
			case rec.host != h:
				f.add("cloud stored an event under the wrong host", d.DeliveryID)
			case d.Status == "dlq":
				dlq++
				if !opts.allowDLQ || d.LastError == "" {
					f.add("dead-lettered", fmt.Sprintf("%s (%d attempts: %s)", d.DeliveryID, d.Attempts, d.LastError))
				}
			case d.Status != "acked":
				f.add("not acked in the cloud", fmt.Sprintf("%s (%s, %d attempts)", d.DeliveryID, d.Status, d.Attempts))
			}
		}
		for ev, ids := range byEvent {
			if len(ids) > 1 {
				f.add("event stored more than once", fmt.Sprintf("%s → %s", ev, strings.Join(ids, " ")))
			}
		}
	}

	// The ledgers' view.
	ledgers := map[string]map[string]ledgerRow{}
	for _, h := range hosts {
		rows, err := e.ledgerRows(ctx, h.state)
		if err != nil {
			r.failf("ledger of %s: %v", h.name, err)
			return
		}
		ledgers[h.id] = map[string]ledgerRow{}
		for _, row := range rows {
			ledgers[h.id][row.DeliveryID] = row
			if owner := deliveryHost[row.DeliveryID]; owner != h {
				f.add("ledger row of a delivery that is not the host's", fmt.Sprintf("%s in %s's ledger", row.DeliveryID, h.name))
			}
		}
	}

	// The receivers' view.
	handled, once, explained := 0, 0, 0
	var explainedWhy []string
	seen := map[string]bool{} // delivery ids some receiver got
	for _, h := range hosts {
		for key, arr := range h.rc.snapshot() {
			seen[key] = true
			ev := deliveryEvent[key]
			owner := deliveryHost[key]
			switch {
			case owner == nil:
				f.add("receiver got a delivery the cloud does not have", fmt.Sprintf("%s at %s (event %s)", key, h.name, arr[0].eventID))
				continue
			case owner != h:
				f.add("MISROUTED: a host handled another host's event", fmt.Sprintf("%s (%s's) at %s", key, owner.name, h.name))
				continue
			}
			for _, a := range arr {
				if !a.sigOK || a.bodyHost != h.id || a.bodyEvent != ev || a.eventID != ev {
					f.add("receiver got a body or headers not as sent", fmt.Sprintf("%s at %s (sig ok %v, body host %s, body event %s)", key, h.name, a.sigOK, a.bodyHost, a.bodyEvent))
					break
				}
			}
			rec := events[ev]
			if rec == nil || !rec.ok {
				f.add("handled without a 2xx to the sender", fmt.Sprintf("%s at %s", key, h.name))
				continue
			}
			handled++
			if len(arr) == 1 {
				once++
			}
			if len(arr) > 1 {
				why := ""
				if opts.explain != nil {
					why = opts.explain(h, key, arr)
				}
				if row, ok := ledgers[h.id][key]; ok && row.Attempts > 1 {
					// Each run the ledger recorded succeeded (the receiver
					// answers 200): a run after a recorded success.
					why = ""
					f.add("DUPLICATE: run again after its success was in the ledger", fmt.Sprintf("%s ×%d at %s (ledger: %d runs recorded)", key, len(arr), h.name, row.Attempts))
				} else if why == "" {
					f.add("DUPLICATE: handled more than once", fmt.Sprintf("%s ×%d at %s (attempts %s)", key, len(arr), h.name, attemptsOf(arr)))
				} else {
					explained++
					if len(explainedWhy) < 1 {
						explainedWhy = append(explainedWhy, key+": "+why)
					}
				}
			}
		}
	}

	// Every event that got a 2xx: stored once, recorded, handled.
	for evID, id := range okDelivery {
		rec := events[evID]
		d, inCloud := cloud[rec.host.id][id]
		if !inCloud {
			f.add("LOST: 2xx answered but not in the cloud", fmt.Sprintf("%s (delivery %s)", evID, id))
			continue
		}
		if d.Status == "dlq" && opts.allowDLQ {
			continue
		}
		if !seen[id] {
			f.add("LOST: 2xx answered but never handled", fmt.Sprintf("%s (%s, cloud %s, %d attempts)", id, rec.host.name, d.Status, d.Attempts))
		}
		switch row, ok := ledgers[rec.host.id][id]; {
		case !ok:
			f.add("not in its host's ledger", fmt.Sprintf("%s (%s, cloud %s)", id, rec.host.name, d.Status))
		case row.Result != "success":
			f.add("ledger result not success", fmt.Sprintf("%s (%s: %s)", id, row.Result, row.Error))
		}
	}
	// Stored without a 2xx is allowed (the answer was lost); handled is not
	// (checked above).
	storedNo2xx := 0
	for id, ev := range deliveryEvent {
		if rec := events[ev]; rec != nil && !rec.ok {
			storedNo2xx++
			_ = id
		}
	}

	r.figuref("%d sent, %d got 2xx (%d after retries), %d gave up", sent, ok, retried, gaveUp)
	r.figuref("%d of %d handled once", once, handled)
	if explained > 0 {
		r.figuref("%d re-run in the at-least-once window (same Idempotency-Key; e.g. %s)", explained, strings.Join(explainedWhy, "; "))
	}
	if attemptsOver1 > 0 {
		r.figuref("%d handed out more than once by the cloud", attemptsOver1)
	}
	if dlq > 0 {
		r.figuref("%d dead-lettered", dlq)
	}
	if storedNo2xx > 0 {
		r.figuref("%d stored without a 2xx reaching the sender", storedNo2xx)
	}
	f.into(r)
}

func attemptsOf(arr []arrival) string {
	var as []string
	for _, a := range arr {
		as = append(as, a.attempt)
	}
	return strings.Join(as, ",")
}

// killBetween explains a repeat by a SIGKILL of the host between the first
// two arrivals: the host died after its handler started and before the
// outcome was in its ledger.
func killBetween(h *relayHost, key string, arr []arrival) string {
	for i := 1; i < len(arr); i++ {
		killed := false
		for _, k := range h.kills {
			if k.After(arr[i-1].at) && k.Before(arr[i].at) {
				killed = true
				break
			}
		}
		if !killed {
			return ""
		}
	}
	return fmt.Sprintf("host killed between the runs (%s apart)", arr[len(arr)-1].at.Sub(arr[0].at).Round(time.Millisecond))
}
