package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// groupTarget is a group of hosts as the sender addresses it: its id and
// its github source's secret, in a relayHost (the sender's target) with no
// process of its own.
func groupTarget(name, id, secret string) *relayHost {
	return &relayHost{name: name, id: id, secret: secret}
}

// newChaosGroup creates a group of members with a github source of mode
// whose retries come quickly and do not run out during the scenario, and
// lifts its rate limit; each member's receiver checks signatures with the
// group's secret.
func newChaosGroup(ctx context.Context, base, name, mode, secret string, members []*relayHost) (string, error) {
	var g struct {
		ID string `json:"id"`
	}
	if err := admin(ctx, base, "POST", "/api/groups", map[string]any{"name": name}, &g, 201); err != nil {
		return "", err
	}
	for _, m := range members {
		if err := admin(ctx, base, "PUT", "/api/groups/"+g.ID+"/members/"+m.id, map[string]any{}, nil, 200); err != nil {
			return "", err
		}
		m.rc.secret = secret
	}
	if err := admin(ctx, base, "PUT", "/api/groups/"+g.ID+"/sources/github", map[string]any{
		"mode":             mode,
		"secrets":          []string{secret},
		"retry_schedule_s": []int{0, 1, 1, 2, 2, 3},
		"max_attempts":     50,
		"options":          replayGuardOff,
	}, nil, 201); err != nil {
		return "", err
	}
	if err := admin(ctx, base, "PATCH", "/api/groups/"+g.ID,
		map[string]any{"rate_limit_per_min": 1_000_000, "rate_limit_burst": 1_000_000}, nil, 200); err != nil {
		return "", err
	}
	return g.ID, nil
}

// runGroups: an `any` group of three hosts takes 20 webhooks a second while
// its members are SIGKILLed at random points (every 2–6 s each), left down
// for 0.2–3 s and started again; a `fanout` group of three other hosts,
// never killed, takes as many beside it. Their apps take 30–80 ms (any) and
// 5–20 ms (fanout) per webhook. The cloud hands an any member's deliveries
// to another within its lease (5 s) or lateness (3 s), at once on sockets.
// Then: every 2xx handled at least once by an any member and exactly once
// by each fanout member; every repeat in the any group follows a run that
// was never acked (recorded in a member's ledger whose ack the cloud never
// took, or cut by its member's SIGKILL); nothing dead-lettered.
func runGroups(ctx context.Context, e *env) (r result) {
	s, err := e.newSetup(ctx, "groups", 1, 6, "RELAY_LEASE=5s", "RELAY_HOST_LATE_AFTER=3s", "RELAY_HOST_OFFLINE_AFTER=6s")
	if err != nil {
		r.failf("set-up: %v", err)
		return
	}
	base := s.clouds[0].url
	anyMembers, fanMembers := s.hosts[:3], s.hosts[3:]
	anySecret, fanSecret := fmt.Sprintf("chaos-any-secret-%d", e.seed), fmt.Sprintf("chaos-fanout-secret-%d", e.seed)
	anyID, err := newChaosGroup(ctx, base, "chaos-any", "any", anySecret, anyMembers)
	if err != nil {
		r.failf("any group: %v", err)
		return
	}
	fanID, err := newChaosGroup(ctx, base, "chaos-fanout", "fanout", fanSecret, fanMembers)
	if err != nil {
		r.failf("fanout group: %v", err)
		return
	}
	for _, h := range anyMembers {
		h.rc.delay = func() time.Duration { return e.randDur(30*time.Millisecond, 80*time.Millisecond) }
	}
	for _, h := range fanMembers {
		h.rc.delay = func() time.Duration { return e.randDur(5*time.Millisecond, 20*time.Millisecond) }
	}
	if err := e.startHosts(ctx, s, base); err != nil {
		r.failf("%v", err)
		return
	}
	anyT, fanT := groupTarget("any group", anyID, anySecret), groupTarget("fanout group", fanID, fanSecret)
	loadFor := pick(e, 4*time.Minute, 40*time.Second)
	const rate = 40.0 // in turn to each group: 20 a second each
	snd := newSender([]string{base}, []*relayHost{anyT, fanT}, "gr", int(rate*loadFor.Seconds()), rate, 60*time.Second)
	snd.start(ctx)

	killCtx, stopKills := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	kills := 0
	for _, h := range anyMembers {
		wg.Go(func() {
			for {
				select {
				case <-killCtx.Done():
					return
				case <-time.After(e.randDur(2*time.Second, 6*time.Second)):
				}
				h.run.Kill()
				mu.Lock()
				h.kills = append(h.kills, time.Now())
				kills++
				mu.Unlock()
				// Down for a while (not past the load's end): what it held
				// goes to the others.
				select {
				case <-killCtx.Done():
				case <-time.After(e.randDur(200*time.Millisecond, 3*time.Second)):
				}
				if err := h.run.Start(); err != nil {
					mu.Lock()
					r.failf("restart %s: %v", h.name, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	snd.wait()
	stopKills()
	wg.Wait()
	for _, h := range anyMembers {
		if err := h.waitUp(ctx); err != nil {
			r.failf("%s: %v", h.name, err)
		}
	}
	r.figuref("%d SIGKILLs of the any group's members over %s", kills, loadFor)
	t0 := time.Now()
	if _, err := waitSettled(ctx, s.urls(), s.hosts, pick(e, 180*time.Second, 90*time.Second)); err != nil {
		r.failf("not settled: %v", err)
	} else {
		r.figuref("settled %s after the load", time.Since(t0).Round(100*time.Millisecond))
	}
	e.compareGroups(ctx, &r, base, snd, groupCheck{anyT: anyT, fanT: fanT, anyMembers: anyMembers, fanMembers: fanMembers})
	return r
}

// groupCheck is what compareGroups compares: the sender's two targets and
// each group's members.
type groupCheck struct {
	anyT, fanT             *relayHost
	anyMembers, fanMembers []*relayHost
}

// memberRun is one run of a delivery at a member's app.
type memberRun struct {
	member *relayHost
	at     time.Time
}

// accountRuns says why each run of an any group's delivery but the last
// was not the one that counted: the member that ran it recorded it in its
// ledger and the cloud never took its ack (another member holds the
// delivery acked: byLedger), or the member was SIGKILLed after the run and
// before the next (its run cut before the ledger had it: byKill). The runs
// it cannot account for are repeats the relay does not allow. runs are
// oldest first; holder is the member whose ack the cloud took; inLedger
// says whether a member's ledger has the delivery.
func accountRuns(runs []memberRun, holder *relayHost, inLedger func(*relayHost) bool) (byLedger, byKill int, unexplained []memberRun) {
	for i := 0; i+1 < len(runs); i++ {
		run, next := runs[i], runs[i+1]
		switch {
		case run.member != holder && inLedger(run.member):
			byLedger++
		case killedBetween(run.member, run.at, next.at):
			byKill++
		default:
			unexplained = append(unexplained, run)
		}
	}
	return byLedger, byKill, unexplained
}

// killedBetween reports whether the scenario SIGKILLed h after from and
// before to.
func killedBetween(h *relayHost, from, to time.Time) bool {
	for _, k := range h.kills {
		if k.After(from) && k.Before(to) {
			return true
		}
	}
	return false
}

// compareGroups compares the four records of the groups scenario: the
// sender's 2xx log, the cloud's deliveries (read from base), each member's
// ledger and each member's receiver.
func (e *env) compareGroups(ctx context.Context, r *result, base string, s *sender, g groupCheck) {
	var f findings
	events := map[string]*sendRecord{}
	sent, ok, gaveUp := 0, 0, 0
	for _, rec := range s.records {
		if rec.tries == 0 {
			continue
		}
		sent++
		events[rec.eventID] = rec
		if !rec.ok {
			gaveUp++
			f.add("events the sender gave up on (no 2xx before the deadline)", fmt.Sprintf("%s (%d tries, last: %s)", rec.eventID, rec.tries, rec.lastFail))
			continue
		}
		ok++
		for _, a := range rec.answers {
			if a.Status != "queued" && a.Status != "duplicate" {
				f.add("2xx answer that did not store the event", fmt.Sprintf("%s (%q)", rec.eventID, a.Status))
			}
		}
	}

	// The cloud's view: each member's deliveries, by event.
	type stored struct {
		member *relayHost
		d      cloudDelivery
	}
	anyByEvent := map[string][]stored{}
	fanByEvent := map[string][]stored{}
	byDelivery := map[string]stored{}
	dlq, storedNo2xx := 0, 0
	ackedBy := map[*relayHost]int{}
	for _, group := range [][]*relayHost{g.anyMembers, g.fanMembers} {
		target, byEvent := g.anyT, anyByEvent
		if group[0] == g.fanMembers[0] {
			target, byEvent = g.fanT, fanByEvent
		}
		for _, m := range group {
			ds, err := cloudDeliveries(ctx, base, m.id)
			if err != nil {
				r.failf("cloud deliveries of %s: %v", m.name, err)
				return
			}
			for _, d := range ds {
				st := stored{m, d}
				byDelivery[d.DeliveryID] = st
				rec := events[d.EventID]
				switch {
				case rec == nil:
					f.add("cloud delivery of an event never sent", d.DeliveryID)
					continue
				case rec.host != target:
					f.add("MISROUTED: a delivery of the other group's event", fmt.Sprintf("%s at %s", d.DeliveryID, m.name))
					continue
				case !rec.ok:
					storedNo2xx++
				}
				byEvent[d.EventID] = append(byEvent[d.EventID], st)
				switch d.Status {
				case "acked":
					if target == g.anyT {
						ackedBy[m]++
					}
				case "dlq":
					dlq++
					f.add("dead-lettered (a live member could have taken it)", fmt.Sprintf("%s at %s (%d attempts: %s)", d.DeliveryID, m.name, d.Attempts, d.LastError))
				default:
					f.add("not acked in the cloud", fmt.Sprintf("%s at %s (%s, %d attempts)", d.DeliveryID, m.name, d.Status, d.Attempts))
				}
			}
		}
	}

	// The ledgers' view.
	ledgers := map[*relayHost]map[string]ledgerRow{}
	for _, m := range append(append([]*relayHost(nil), g.anyMembers...), g.fanMembers...) {
		rows, err := e.ledgerRows(ctx, m.state)
		if err != nil {
			r.failf("ledger of %s: %v", m.name, err)
			return
		}
		ledgers[m] = map[string]ledgerRow{}
		for _, row := range rows {
			ledgers[m][row.DeliveryID] = row
			if _, ok := byDelivery[row.DeliveryID]; !ok {
				f.add("ledger row of a delivery the cloud does not have", fmt.Sprintf("%s in %s's ledger", row.DeliveryID, m.name))
			}
		}
	}

	// The receivers' view: every run, by delivery, checked as sent.
	runs := map[string][]memberRun{}
	for _, group := range [][]*relayHost{g.anyMembers, g.fanMembers} {
		target := g.anyT
		if group[0] == g.fanMembers[0] {
			target = g.fanT
		}
		for _, m := range group {
			for key, arr := range m.rc.snapshot() {
				st, known := byDelivery[key]
				switch {
				case !known:
					f.add("receiver got a delivery the cloud does not have", fmt.Sprintf("%s at %s", key, m.name))
					continue
				case events[st.d.EventID] == nil || events[st.d.EventID].host != target:
					f.add("MISROUTED: a member handled the other group's event", fmt.Sprintf("%s at %s", key, m.name))
					continue
				case target == g.fanT && st.member != m:
					f.add("MISROUTED: a fanout member handled another member's delivery", fmt.Sprintf("%s (%s's) at %s", key, st.member.name, m.name))
					continue
				case !events[st.d.EventID].ok:
					f.add("handled without a 2xx to the sender", fmt.Sprintf("%s at %s", key, m.name))
				}
				for _, a := range arr {
					if !a.sigOK || a.bodyHost != target.id || a.bodyEvent != st.d.EventID || a.eventID != st.d.EventID {
						f.add("receiver got a body or headers not as sent", fmt.Sprintf("%s at %s (sig ok %v, body group %s, body event %s)", key, m.name, a.sigOK, a.bodyHost, a.bodyEvent))
						break
					}
				}
				for _, a := range arr {
					runs[key] = append(runs[key], memberRun{member: m, at: a.at})
				}
			}
		}
	}

	// any: every 2xx stored once, handled at least once; each repeat
	// accounted for.
	anyOK, anyOnce, byLedger, byKill := 0, 0, 0, 0
	var example string
	for evID, rec := range events {
		if !rec.ok || rec.host != g.anyT {
			continue
		}
		anyOK++
		st := anyByEvent[evID]
		switch {
		case len(st) == 0:
			f.add("LOST: 2xx answered but not in the cloud (any)", evID)
			continue
		case len(st) > 1:
			var ids []string
			for _, x := range st {
				ids = append(ids, x.d.DeliveryID+"@"+x.member.name)
			}
			f.add("any event stored more than once", fmt.Sprintf("%s → %s", evID, strings.Join(ids, " ")))
			continue
		}
		d, holder := st[0].d, st[0].member
		if rec.answers[0].DeliveryID != d.DeliveryID {
			f.add("2xx answer naming another delivery than the one stored (any)", fmt.Sprintf("%s: %s, stored %s", evID, rec.answers[0].DeliveryID, d.DeliveryID))
		}
		rs := runs[d.DeliveryID]
		if len(rs) == 0 {
			if d.Status != "dlq" {
				f.add("LOST: 2xx answered but never handled by an any member", fmt.Sprintf("%s (held by %s, cloud %s, %d attempts)", d.DeliveryID, holder.name, d.Status, d.Attempts))
			}
			continue
		}
		if d.Status == "acked" {
			if row, ok := ledgers[holder][d.DeliveryID]; !ok || row.Result != "success" {
				f.add("acked but not a success in its holder's ledger", fmt.Sprintf("%s at %s (ledger: %q)", d.DeliveryID, holder.name, row.Result))
			}
		}
		if len(rs) == 1 {
			anyOnce++
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].at.Before(rs[j].at) })
		l, k, bad := accountRuns(rs, holder, func(m *relayHost) bool { _, ok := ledgers[m][d.DeliveryID]; return ok })
		byLedger += l
		byKill += k
		if example == "" && l+k > 0 {
			var who []string
			for _, x := range rs {
				who = append(who, x.member.name)
			}
			example = fmt.Sprintf("%s ran on %s, acked by %s", d.DeliveryID, strings.Join(who, ", "), holder.name)
		}
		for _, x := range bad {
			f.add("DUPLICATE: an any delivery run again after a run nothing left unacked", fmt.Sprintf("%s at %s (%d runs)", d.DeliveryID, x.member.name, len(rs)))
		}
	}

	// fanout: every 2xx stored and handled exactly once for each member.
	fanOK, fanOnce := 0, 0
	for evID, rec := range events {
		if !rec.ok || rec.host != g.fanT {
			continue
		}
		fanOK++
		perMember := map[*relayHost]cloudDelivery{}
		for _, x := range fanByEvent[evID] {
			if _, dup := perMember[x.member]; dup {
				f.add("fanout event stored more than once for a member", fmt.Sprintf("%s at %s", evID, x.member.name))
			}
			perMember[x.member] = x.d
		}
		for _, m := range g.fanMembers {
			d, ok := perMember[m]
			if !ok {
				f.add("LOST: 2xx answered but no delivery for a fanout member", fmt.Sprintf("%s for %s", evID, m.name))
				continue
			}
			switch n := len(runs[d.DeliveryID]); {
			case n == 0:
				f.add("LOST: 2xx answered but never handled by a fanout member", fmt.Sprintf("%s at %s (cloud %s)", d.DeliveryID, m.name, d.Status))
			case n > 1:
				f.add("DUPLICATE: a fanout member handled a delivery more than once", fmt.Sprintf("%s ×%d at %s", d.DeliveryID, n, m.name))
			default:
				fanOnce++
			}
			if row, ok := ledgers[m][d.DeliveryID]; !ok || row.Result != "success" {
				f.add("fanout delivery not a success in its member's ledger", fmt.Sprintf("%s at %s (ledger: %q)", d.DeliveryID, m.name, row.Result))
			}
		}
	}

	r.figuref("%d sent, %d got 2xx, %d gave up", sent, ok, gaveUp)
	var shares []string
	for _, m := range g.anyMembers {
		shares = append(shares, fmt.Sprint(ackedBy[m]))
	}
	r.figuref("any: %d of %d run once, acked by member %s; %d repeats after a run recorded but never acked, %d after a run cut by a SIGKILL",
		anyOnce, anyOK, strings.Join(shares, "/"), byLedger, byKill)
	if example != "" {
		r.figuref("e.g. %s", example)
	}
	r.figuref("fanout: %d of %d member deliveries run exactly once", fanOnce, fanOK*len(g.fanMembers))
	if dlq > 0 {
		r.figuref("%d dead-lettered", dlq)
	}
	if storedNo2xx > 0 {
		r.figuref("%d stored without a 2xx reaching the sender", storedNo2xx)
	}
	f.into(r)
}
