package main

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/relaykit/relay/shared"
)

// group is a group of a cloud's hosts with one GitHub source in one mode.
type group struct {
	id      string
	mode    string   // fanout or any
	members []string // host ids, in order
}

// createGroup creates a group named name on e's cloud, adds every host of
// e to it in order, and gives it a "github" source in mode.
func createGroup(ctx context.Context, e *engine, name, mode string) (*group, error) {
	var g shared.Group
	if err := e.cloud.Do(ctx, "POST", "/api/groups", shared.CreateGroupRequest{Name: name}, &g); err != nil {
		return nil, fmt.Errorf("%s: create group %s: %w", e.name, name, err)
	}
	for _, id := range e.ids {
		if err := e.cloud.Do(ctx, "PUT", "/api/groups/"+g.ID+"/members/"+id, nil, nil); err != nil {
			return nil, fmt.Errorf("%s: group %s: add member %s: %w", e.name, name, id, err)
		}
	}
	spec := githubSpec()
	spec["mode"] = mode
	if err := e.cloud.Do(ctx, "PUT", "/api/groups/"+g.ID+"/sources/github", spec, nil); err != nil {
		return nil, fmt.Errorf("%s: group %s: source: %w", e.name, name, err)
	}
	return &group{id: g.ID, mode: mode, members: append([]string(nil), e.ids...)}, nil
}

// githubSpec is the GitHub source of a host or a group: three attempts a
// few seconds apart (a doomed webhook is dead-lettered within seconds),
// and the replay guard off (the soak sends many payloads alike).
func githubSpec() map[string]any {
	return map[string]any{"provider": "github", "secrets": []string{secret}, "retry_schedule_s": []int{0, 2, 3},
		"options": map[string]string{"replay_guard": "off"}}
}

// groupRun is one 200 the receiver answered to a group's forward.
type groupRun struct {
	key    string // Idempotency-Key
	member string // the host that forwarded it (its path at the receiver)
	group  string // X-Relay-Group
}

// groupFindings are what the group checks found, for the report.
type groupFindings struct {
	fanoutAccepted, fanoutOnce int
	anyAccepted, anyHandled    int
	anySecondRuns, anyTwice    int            // extra runs, and the webhooks run more than once
	anyByMember                map[string]int // runs of any webhooks by member name
}

// checkGroups checks every webhook answered 2xx at a group's URL
// (accepted: event id → its group) against the receiver's 200s to groups'
// forwards (runs: event id → each): a fanout webhook is handled exactly
// once by each member; an any webhook at least once by some member, and
// more than once only under its one Idempotency-Key. It returns the
// findings and the failures.
func checkGroups(accepted map[string]*group, runs map[string][]groupRun, names map[string]string) (groupFindings, []string) {
	f := groupFindings{anyByMember: map[string]int{}}
	var missing, twice, stray, keys, unknown []string
	for ev, g := range accepted {
		rs := runs[ev]
		for _, r := range rs {
			if r.group != g.id || !contains(g.members, r.member) {
				stray = append(stray, fmt.Sprintf("%s by %s of %s", ev, r.member, r.group))
			}
		}
		switch g.mode {
		case "fanout":
			f.fanoutAccepted++
			ok, keysOf := true, map[string]bool{}
			for _, m := range g.members {
				n := 0
				for _, r := range rs {
					if r.member == m {
						n++
						keysOf[r.key] = true
					}
				}
				switch {
				case n == 0:
					missing = append(missing, ev+" at "+names[m])
					ok = false
				case n > 1:
					twice = append(twice, fmt.Sprintf("%s at %s (%d)", ev, names[m], n))
					ok = false
				}
			}
			if ok && len(keysOf) == len(g.members) {
				f.fanoutOnce++
			} else if ok {
				keys = append(keys, ev+" (members share an Idempotency-Key)")
			}
		case "any":
			f.anyAccepted++
			if len(rs) == 0 {
				missing = append(missing, ev+" at any member")
				continue
			}
			f.anyHandled++
			for _, r := range rs {
				f.anyByMember[names[r.member]]++
			}
			if len(rs) > 1 {
				f.anyTwice++
				f.anySecondRuns += len(rs) - 1
				if distinctKeys(rs) > 1 {
					keys = append(keys, fmt.Sprintf("%s (%d runs under %d Idempotency-Keys)", ev, len(rs), distinctKeys(rs)))
				}
			}
		}
	}
	for ev := range runs {
		if accepted[ev] == nil {
			unknown = append(unknown, ev)
		}
	}
	var failures []string
	for _, x := range []struct {
		what string
		evs  []string
	}{
		{"group webhooks answered 2xx but never handled by a member", missing},
		{"fanout webhooks handled more than once by a member", twice},
		{"group webhooks handled by a host not of their group", stray},
		{"group webhooks run under the wrong Idempotency-Keys", keys},
		{"group webhooks handled but never answered 2xx", unknown},
	} {
		if len(x.evs) > 0 {
			sort.Strings(x.evs)
			failures = append(failures, fmt.Sprintf("%s: %d (%s)", x.what, len(x.evs), strings.Join(first(x.evs, 10), ", ")))
		}
	}
	return f, failures
}

func distinctKeys(rs []groupRun) int {
	k := map[string]bool{}
	for _, r := range rs {
		k[r.key] = true
	}
	return len(k)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// leftDelivery is a delivery left after the drain, as the admin API lists
// it.
type leftDelivery struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Status     string `json:"status"`
}

// leftOver lists what is left on each host of each engine, not acked, and
// counts it by engine, what took it (the hosts' own URLs, the fanout
// group's or the any group's; sentTo: event id → group) and status.
func leftOver(ctx context.Context, engines []*engine, sentTo map[string]*group) (map[string]int, error) {
	left := map[string]int{}
	for _, e := range engines {
		for _, id := range e.ids {
			counts, err := e.cloud.Counts(ctx, id)
			if err != nil {
				return nil, err
			}
			for st, c := range counts {
				if st == "acked" || c == 0 {
					continue
				}
				ds, err := listDeliveries(ctx, e, id, st)
				if err != nil {
					return nil, err
				}
				if len(ds) == 0 {
					// Gone between the count and the list: counted as
					// the count said, by the hosts' URLs.
					left[e.name+" hosts "+st] += c
				}
				for _, d := range ds {
					by := "hosts"
					if g := sentTo[d.EventID]; g != nil {
						by = g.mode + " group"
					}
					left[e.name+" "+by+" "+st]++
				}
			}
		}
	}
	return left, nil
}

// listDeliveries lists a host's deliveries in one status, following the
// cursors.
func listDeliveries(ctx context.Context, e *engine, hostID, status string) ([]leftDelivery, error) {
	var all []leftDelivery
	cursor := ""
	for {
		q := url.Values{"limit": {"500"}, "status": {status}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Webhooks   []leftDelivery `json:"webhooks"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := e.cloud.Do(ctx, "GET", "/api/hosts/"+hostID+"/webhooks?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Webhooks...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}
