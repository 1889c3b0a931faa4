package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func decodeJSON(resp *http.Response, v any) {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(b, v)
}

// allowance is what a series may grow beyond 10 % from its second quarter
// to its last, in its own unit: noise a series near zero shows without
// growing (a handful of requests in flight, a connection opened for a
// sample, a WAL checkpointed a moment later).
var allowance = map[string]float64{
	"cloud_rss":        4,  // MiB
	"cloud_goroutines": 10, // goroutines
	"cloud_fds":        5,  // descriptors
	"db":               1,  // MiB
	"wal":              16, // MiB: one Postgres WAL segment, or SQLite's WAL before a checkpoint
	"pending":          40, // deliveries: two seconds of load
	"inflight":         40, // deliveries
	"group_waiting":    20, // deliveries: a second of the any groups' share, or one member's restart
	"host_rss":         6,  // MiB over three hosts
	"host_threads":     6,  // threads over three hosts
	"host_fds":         6,  // descriptors over three hosts
}

// report is a run's samples and findings.
type report struct {
	cfg                      config
	engines                  string
	samples                  []sample
	started                  time.Time
	sent, accepted, gaveUp   int
	gaveUpWhy                string
	restarts, retriedByHand  int
	load                     string
	links                    []hostLink
	handled, duplicates, odd int
	groups                   groupFindings
	linkLines                []string // one line per host: its transport through the run
	flat                     []string // one line per series: the rule's figures
	allowed                  []string // series over 10 % growth, within their allowance
	failures                 []string
}

// check applies the rules: flat series; each webhook handled as its URL
// promises (accepted: a host's own by delivery id → host id, a group's by
// event id → group; ok and runs: the receiver's 200s to them; names: host
// id → name); each host on its transport; nothing left.
func (r *report) check(accepted map[string]string, groupAccepted map[string]*group, ok map[string][]string, runs map[string][]groupRun,
	names map[string]string, left map[string]int) {
	// Flat after warm-up.
	n := len(r.samples)
	if n < 8 {
		r.failures = append(r.failures, fmt.Sprintf("only %d samples: too few to tell flat from growing (need 8)", n))
	}
	for _, key := range r.seriesKeys() {
		if n < 8 {
			break
		}
		vals := make([]float64, n)
		for i, s := range r.samples {
			vals[i] = s.values[key]
		}
		q2, q4 := mean(vals[n/4:n/2]), mean(vals[3*n/4:])
		_, name, _ := strings.Cut(key, ".")
		limit := q2*1.10 + allowance[name]
		verdict := "flat"
		if q4 > q2*1.10 && q4 <= limit {
			verdict = "flat (allowance)"
			r.allowed = append(r.allowed, key)
		}
		if q4 > limit {
			verdict = "GROWS"
			r.failures = append(r.failures, fmt.Sprintf("%s grows: last quarter's mean %.1f over %.1f (second quarter's %.1f + 10 %% + %.0f)", key, q4, limit, q2, allowance[name]))
		}
		r.flat = append(r.flat, fmt.Sprintf("| %s | %.1f | %.1f | %.1f | %s |", key, q2, q4, limit, verdict))
	}
	// A host's own webhooks: exactly once, by that host.
	var missing, dup, unknown, other []string
	for key, host := range accepted {
		switch by := ok[key]; {
		case len(by) == 0:
			missing = append(missing, key)
		case len(by) > 1:
			dup = append(dup, fmt.Sprintf("%s (%d)", key, len(by)))
		case by[0] != host:
			other = append(other, fmt.Sprintf("%s (by %s, not %s)", key, names[by[0]], names[host]))
		default:
			r.handled++
		}
	}
	for key := range ok {
		if _, ok := accepted[key]; !ok {
			unknown = append(unknown, key)
		}
	}
	r.duplicates, r.odd = len(dup), len(unknown)
	for _, f := range []struct {
		what string
		keys []string
	}{{"answered 2xx but never handled", missing}, {"handled more than once", dup}, {"handled by another host than its own", other},
		{"handled but never answered 2xx", unknown}} {
		if len(f.keys) > 0 {
			sort.Strings(f.keys)
			r.failures = append(r.failures, fmt.Sprintf("%s: %d (%s)", f.what, len(f.keys), strings.Join(first(f.keys, 10), ", ")))
		}
	}
	// A group's webhooks: once by each member (fanout), at least once by
	// one, again only under the same key (any).
	var gf []string
	r.groups, gf = checkGroups(groupAccepted, runs, names)
	r.failures = append(r.failures, gf...)
	// Each host on its transport.
	r.checkLinks()
	// A steady load is taken: every webhook answered 2xx within a
	// provider's five tries.
	if r.gaveUp > 0 {
		r.failures = append(r.failures, fmt.Sprintf("%d webhooks never answered 2xx in five tries (%s)", r.gaveUp, r.gaveUpWhy))
	}
	// Nothing left.
	if len(left) > 0 {
		var l []string
		for k, v := range left {
			l = append(l, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(l)
		r.failures = append(r.failures, "left after the drain: "+strings.Join(l, ", "))
	}
}

// checkLinks tallies the transport each host was seen on at each sample
// and fails a socket host seen on heartbeats (or falling back to them, or
// never connecting its socket) and a long-poll host that opened a socket.
func (r *report) checkLinks() {
	for _, l := range r.links {
		seen := map[string]int{}
		for _, s := range r.samples {
			seen[s.links[l.name]]++
		}
		var tally []string
		for _, t := range []string{"websocket", "heartbeat", "not connected", "down"} {
			if seen[t] > 0 {
				tally = append(tally, fmt.Sprintf("%s %d", t, seen[t]))
			}
		}
		end := l.last.inUse
		if l.err != nil {
			end = "unread (" + firstLine(l.err) + ")"
		}
		r.linkLines = append(r.linkLines, fmt.Sprintf("| %s | %s | %s of %d | %s | %d | %d | %d |",
			l.name, l.configured, strings.Join(tally, ", "), len(r.samples), end, l.sockets, l.lost, l.fellBack))
		switch l.configured {
		case "heartbeat":
			if seen["websocket"] > 0 || l.sockets > 0 {
				r.failures = append(r.failures, fmt.Sprintf("%s (transport heartbeat) opened a socket", l.name))
			}
		default:
			if seen["heartbeat"] > 0 || l.fellBack > 0 || l.sockets == 0 {
				r.failures = append(r.failures, fmt.Sprintf("%s (transport %s) was not on its socket throughout: samples %v, sockets opened %d, falls back %d",
					l.name, l.configured, seen, l.sockets, l.fellBack))
			}
		}
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// seriesKeys are the sampled series, engine by engine, in table order.
func (r *report) seriesKeys() []string {
	var keys []string
	for _, eng := range strings.Split(r.engines, ", ") {
		for _, s := range series {
			keys = append(keys, eng+"."+s.key)
		}
	}
	return keys
}

func (r *report) markdown() string {
	var b strings.Builder
	kind := "full run"
	if r.cfg.short {
		kind = "-short run"
	}
	fmt.Fprintf(&b, "# Soak (`make soak`)\n\n")
	fmt.Fprintf(&b, "%s, %s: %s of traffic at %.0f signed webhooks/s (GitHub, Stripe, Slack) to two clouds (%s), three hosts each (two on the socket, one on the long poll) and two groups of those three (GitHub in fanout and in any mode; a tenth of the webhooks each); sampled every %s. ",
		kind, r.started.UTC().Format("2006-01-02 15:04 UTC"), r.cfg.runFor, r.cfg.rate, r.engines, r.cfg.every)
	fmt.Fprintf(&b, "Machine: %d CPUs, load average at the end %s (shared with other work).\n\n", numCPU(), r.load)
	why := ""
	if r.gaveUpWhy != "" {
		why = ": " + r.gaveUpWhy
	}
	g := r.groups
	fmt.Fprintf(&b, "Sent %d, answered 2xx %d (gave up %d%s). To the hosts' own URLs: handled exactly once by their host %d, duplicates %d. ",
		r.sent, r.accepted, r.gaveUp, why, r.handled, r.duplicates)
	fmt.Fprintf(&b, "To the fanout groups: %d answered 2xx, handled exactly once by each member %d. ", g.fanoutAccepted, g.fanoutOnce)
	fmt.Fprintf(&b, "To the any groups: %d answered 2xx, handled %d, of which run again (same Idempotency-Key) %d, %d second runs in all; runs by member: %s. ",
		g.anyAccepted, g.anyHandled, g.anyTwice, g.anySecondRuns, byMember(g.anyByMember))
	fmt.Fprintf(&b, "Hosts restarted %d times; dead letters retried by hand %d.\n\n", r.restarts, r.retriedByHand)
	if len(r.failures) == 0 {
		fmt.Fprintf(&b, "**Passed.**\n\n")
	} else {
		fmt.Fprintf(&b, "**Failed:**\n\n")
		for _, f := range r.failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	b.WriteString("Flat rule: the last quarter's mean at most the second quarter's + 10 % + an allowance per series (scripts/soak/report.go).")
	if r.cfg.short {
		b.WriteString(" A -short run is too short to tell slow growth from warm-up.")
	}
	if len(r.allowed) > 0 {
		fmt.Fprintf(&b, " Above 10 %% and within their allowance only: %s.", strings.Join(r.allowed, ", "))
	}
	b.WriteString("\n\n")
	b.WriteString("| series | 2nd quarter | last quarter | limit | |\n|---|---|---|---|---|\n")
	for _, l := range r.flat {
		b.WriteString(l + "\n")
	}
	b.WriteString("\nTransports: what each host's page said at each sample (down: restarting), at the end, and its log over every start.\n\n")
	b.WriteString("| host | configured | at the samples | at the end | sockets opened | sockets lost | falls back to heartbeats |\n|---|---|---|---|---|---|---|\n")
	for _, l := range r.linkLines {
		b.WriteString(l + "\n")
	}
	for _, eng := range strings.Split(r.engines, ", ") {
		fmt.Fprintf(&b, "\n## %s\n\n| t |", eng)
		for _, s := range series {
			fmt.Fprintf(&b, " %s |", s.head)
		}
		b.WriteString("\n|---|")
		for range series {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, sm := range r.samples {
			fmt.Fprintf(&b, "| %s |", sm.at.Round(time.Second))
			for _, s := range series {
				fmt.Fprintf(&b, " %s |", num(sm.values[eng+"."+s.key]))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n![each series over time](soak.svg)\n")
	return b.String()
}

func byMember(m map[string]int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\nprocessor") + 1
}

func (r *report) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "SOAK.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "soak.svg"), []byte(r.svg()), 0o644)
}

// svg draws one small panel per series, a line per engine, each panel on
// its own scale from zero.
func (r *report) svg() string {
	const w, h, cols, pad = 240, 110, 5, 24
	engines := strings.Split(r.engines, ", ")
	colors := map[string]string{"sqlite": "#1f77b4", "postgres": "#d62728"}
	rows := (len(series) + cols - 1) / cols
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">`+"\n", cols*w, rows*h+20)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, eng := range engines {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">— %s</text>`+"\n", 10+i*80, rows*h+14, colors[eng], eng)
	}
	end := time.Duration(1)
	if len(r.samples) > 0 {
		end = max(r.samples[len(r.samples)-1].at, time.Second)
	}
	for i, s := range series {
		x0, y0 := (i%cols)*w, (i/cols)*h
		top := 0.0
		for _, eng := range engines {
			for _, sm := range r.samples {
				top = max(top, sm.values[eng+"."+s.key])
			}
		}
		if top <= 0 {
			top = 1
		}
		fmt.Fprintf(&b, `<g transform="translate(%d,%d)"><text x="%d" y="12">%s (max %s)</text>`, x0, y0, pad, s.head, num(top))
		fmt.Fprintf(&b, `<rect x="%d" y="16" width="%d" height="%d" fill="none" stroke="#ccc"/>`, pad, w-pad-8, h-16-pad/2)
		pw, ph := float64(w-pad-8), float64(h-16-pad/2)
		for _, eng := range engines {
			var pts []string
			for _, sm := range r.samples {
				v, ok := sm.values[eng+"."+s.key]
				if !ok {
					continue
				}
				x := float64(pad) + pw*float64(sm.at)/float64(end)
				y := 16 + ph - ph*max(v, 0)/top
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colors[eng], strings.Join(pts, " "))
			}
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.String()
}
