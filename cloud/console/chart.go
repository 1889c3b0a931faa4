package console

import (
	"fmt"
	"html/template"
	"strings"
)

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
