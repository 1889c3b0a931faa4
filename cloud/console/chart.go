package console

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"

	"github.com/relaykit/relay/cloud/store"
)

// The volume chart's outcomes, bottom to top, each with its colour (fill
// attributes, not styles: the Content-Security-Policy allows no inline
// style).
var volumeSeries = []struct {
	name, color string
	count       func(store.VolumeHour) int
}{
	{store.OutcomeReceived, "#4c78a8", func(h store.VolumeHour) int { return h.Received }},
	{store.OutcomeAcked, "#54a24b", func(h store.VolumeHour) int { return h.Acked }},
	{store.OutcomeFailed, "#f58518", func(h store.VolumeHour) int { return h.Failed }},
	{store.OutcomeDeadLettered, "#e45756", func(h store.VolumeHour) int { return h.DeadLettered }},
	{store.OutcomeRejected, "#9d755d", func(h store.VolumeHour) int { return h.Rejected }},
}

// The volume chart's geometry, in SVG user units (it scales to its box).
const (
	chartW, chartH              = 720, 240
	plotLeft, plotRight         = 48, 708
	plotTop, plotBottom         = 28, 196
	legendY                     = 228
	chartTick                   = 4
	chartMinBar         float64 = 1 // a non-zero count stays visible beside a huge hour
)

// VolumeChart draws hours (store.DeliveryVolume's answer, oldest first) as
// stacked bars, one per hour and outcome, with a y axis of webhook counts,
// hour labels in UTC, a legend, and a <title> on every bar (a tooltip, and
// what a screen reader says). Every text in it is escaped.
func VolumeChart(title string, hours []store.VolumeHour) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" role="img" aria-labelledby="chart-title">`, chartW, chartH)
	fmt.Fprintf(&b, `<title id="chart-title">%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, plotLeft, html.EscapeString(title))

	most := 0
	for _, h := range hours {
		most = max(most, h.Total())
	}
	top := niceCeil(most)
	// The y axis: 0, half and the top, with grid lines.
	for _, v := range []int{0, top / 2, top} {
		if v == top/2 && top < 2 {
			continue
		}
		y := plotBottom - float64(v)/float64(top)*(plotBottom-plotTop)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`, plotLeft-6, y+4, formatCount(v))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, plotLeft, plotTop, plotLeft, plotBottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, plotLeft, plotBottom, plotRight, plotBottom)

	if most == 0 {
		fmt.Fprintf(&b, `<text class="chart-empty" x="%d" y="%d" font-size="13" text-anchor="middle" fill="#666">no webhooks in these hours</text>`,
			(plotLeft+plotRight)/2, (plotTop+plotBottom)/2)
	}
	if n := len(hours); n > 0 {
		slot := float64(plotRight-plotLeft) / float64(n)
		barW := math.Max(slot*0.7, 1)
		every := max(1, n/8) // at most 8 hour labels
		for i, h := range hours {
			x := plotLeft + float64(i)*slot + (slot-barW)/2
			when := h.Start.UTC().Format("15:04") + "–" + h.Start.UTC().Add(60*60*1e9).Format("15:04")
			fmt.Fprintf(&b, `<g class="bar"><title>%s UTC: %s</title>`, when, html.EscapeString(hourSummary(h)))
			y := float64(plotBottom)
			for _, s := range volumeSeries {
				c := s.count(h)
				if c == 0 {
					continue
				}
				ht := math.Max(float64(c)/float64(top)*(plotBottom-plotTop), chartMinBar)
				y -= ht
				fmt.Fprintf(&b, `<rect class="seg-%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s UTC: %s %s</title></rect>`,
					s.name, x, y, barW, ht, s.color, when, formatCount(c), s.name)
			}
			b.WriteString(`</g>`)
			if i%every == 0 {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, x+barW/2, plotBottom, x+barW/2, plotBottom+chartTick)
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`, x+barW/2, plotBottom+16, h.Start.UTC().Format("15:04"))
			}
		}
	}
	// The legend.
	x := plotLeft
	for _, s := range volumeSeries {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text>`,
			x, legendY-9, s.color, x+14, legendY, s.name)
		x += 14 + 8*len(s.name) + 16
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text above is escaped or ours
}

// hourSummary is an hour's counts, every outcome named.
func hourSummary(h store.VolumeHour) string {
	parts := make([]string, 0, len(volumeSeries))
	for _, s := range volumeSeries {
		parts = append(parts, formatCount(s.count(h))+" "+s.name)
	}
	return strings.Join(parts, ", ")
}

// niceCeil is the axis top for a largest value n: the next 1, 2 or 5 times
// a power of ten at or above it (1 for none).
func niceCeil(n int) int {
	if n <= 1 {
		return 1
	}
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
		if p > math.MaxInt/100 {
			return n
		}
	}
}

// formatCount writes n with thousands separators: 12,345.
func formatCount(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + formatCount(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Sparkline draws counts (oldest first) as a small SVG line with the area
// under it, scaled to the largest count; title is its tooltip. All zeros
// (or none) draw a flat line at the bottom. The SVG carries no style
// attribute or script: it is coloured by console.css (.spark).
func Sparkline(counts []int, title string) template.HTML {
	const w, h, pad = 120.0, 24.0, 1.0
	peak := 0
	for _, n := range counts {
		peak = max(peak, n)
	}
	var pts []string
	n := len(counts)
	for i, v := range counts {
		x := pad
		if n > 1 {
			x = pad + float64(i)*(w-2*pad)/float64(n-1)
		}
		y := h - pad
		if peak > 0 {
			y = h - pad - float64(v)/float64(peak)*(h-2*pad)
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	if n == 1 {
		pts = append(pts, fmt.Sprintf("%.1f,%s", w-pad, strings.Split(pts[0], ",")[1]))
	}
	if n == 0 {
		pts = []string{fmt.Sprintf("%.1f,%.1f", pad, h-pad), fmt.Sprintf("%.1f,%.1f", w-pad, h-pad)}
	}
	first, last := strings.Split(pts[0], ",")[0], strings.Split(pts[len(pts)-1], ",")[0]
	area := fmt.Sprintf("%s,%.1f %s %s,%.1f", first, h-pad, strings.Join(pts, " "), last, h-pad)
	return template.HTML(fmt.Sprintf(
		`<svg class="spark" viewBox="0 0 %g %g" width="%g" height="%g" role="img" aria-label="%s">`+
			`<title>%s</title><polygon class="spark-area" points="%s"/><polyline class="spark-line" points="%s"/></svg>`,
		w, h, w, h, template.HTMLEscapeString(title), template.HTMLEscapeString(title), area, strings.Join(pts, " ")))
}
