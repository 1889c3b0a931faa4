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
	handled, duplicates, odd int
	flat                     []string // one line per series: the rule's figures
	allowed                  []string // series over 10 % growth, within their allowance
	failures                 []string
}

// check applies the three rules.
func (r *report) check(accepted map[string]bool, ok map[string]int, left map[string]int) {
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
	// Exactly once.
	var missing, dup, unknown []string
	for key := range accepted {
		switch c := ok[key]; {
		case c == 0:
			missing = append(missing, key)
		case c > 1:
			dup = append(dup, fmt.Sprintf("%s (%d)", key, c))
		default:
			r.handled++
		}
	}
	for key := range ok {
		if !accepted[key] {
			unknown = append(unknown, key)
		}
	}
	r.duplicates, r.odd = len(dup), len(unknown)
	for _, f := range []struct {
		what string
		keys []string
	}{{"answered 2xx but never handled", missing}, {"handled more than once", dup}, {"handled but never answered 2xx", unknown}} {
		if len(f.keys) > 0 {
			sort.Strings(f.keys)
			r.failures = append(r.failures, fmt.Sprintf("%s: %d (%s)", f.what, len(f.keys), strings.Join(first(f.keys, 10), ", ")))
		}
	}
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
	fmt.Fprintf(&b, "%s, %s: %s of traffic at %.0f signed webhooks/s (GitHub, Stripe, Slack) to two clouds (%s), three hosts each; sampled every %s. ",
		kind, r.started.UTC().Format("2006-01-02 15:04 UTC"), r.cfg.runFor, r.cfg.rate, r.engines, r.cfg.every)
	fmt.Fprintf(&b, "Machine: %d CPUs, load average at the end %s (shared with other work).\n\n", numCPU(), r.load)
	why := ""
	if r.gaveUpWhy != "" {
		why = ": " + r.gaveUpWhy
	}
	fmt.Fprintf(&b, "Sent %d, answered 2xx %d (gave up %d%s), handled exactly once %d, duplicates %d; hosts restarted %d times; dead letters retried by hand %d.\n\n",
		r.sent, r.accepted, r.gaveUp, why, r.handled, r.duplicates, r.restarts, r.retriedByHand)
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
