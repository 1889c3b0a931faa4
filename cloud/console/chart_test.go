package console

import (
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// svgRect is one stacked segment of the chart, as drawn.
type svgRect struct {
	class  string
	height float64
	title  string
}

// parseChart checks the chart is well-formed XML and returns its
// segments and texts.
func parseChart(t *testing.T, svg string) (rects []svgRect, texts []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var in *svgRect
	var text *strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return rects, texts
		}
		require.NoError(t, err, "well-formed SVG")
		switch tok := tok.(type) {
		case xml.StartElement:
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch {
			case tok.Name.Local == "rect" && strings.HasPrefix(attr("class"), "seg-"):
				h, err := strconv.ParseFloat(attr("height"), 64)
				require.NoError(t, err)
				rects = append(rects, svgRect{class: attr("class"), height: h})
				in = &rects[len(rects)-1]
			case tok.Name.Local == "text" || tok.Name.Local == "title":
				text = &strings.Builder{}
			}
		case xml.CharData:
			if text != nil {
				text.Write(tok)
			}
		case xml.EndElement:
			switch tok.Name.Local {
			case "title":
				if in != nil {
					in.title = text.String()
				}
				texts = append(texts, text.String())
				text = nil
			case "text":
				texts = append(texts, text.String())
				text = nil
			case "rect":
				in = nil
			}
		}
	}
}

func day(counts map[int]store.VolumeHour) []store.VolumeHour {
	start := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	out := make([]store.VolumeHour, 24)
	for i := range out {
		out[i] = counts[i]
		out[i].Start = start.Add(time.Duration(i) * time.Hour)
	}
	return out
}

const plotHeight = plotBottom - plotTop

func TestVolumeChartScalesBars(t *testing.T) {
	rects, texts := parseChart(t, string(VolumeChart("Webhooks per hour", day(map[int]store.VolumeHour{
		3:  {Received: 50, Acked: 40, Failed: 5, DeadLettered: 3, Rejected: 2}, // 100: the axis top
		10: {Received: 25, Acked: 25},
	}))))
	require.Len(t, rects, 7, "one segment per non-zero count")
	total := 0.0
	for _, r := range rects[:5] {
		total += r.height
	}
	require.InDelta(t, plotHeight, total, 0.5, "the largest hour fills the plot")
	require.InDelta(t, plotHeight/2, rects[0].height, 0.5, "50 of 100")
	require.Equal(t, "seg-received", rects[0].class, "received at the bottom")
	require.Equal(t, "seg-rejected", rects[4].class)
	require.InDelta(t, plotHeight/4, rects[5].height, 0.5)
	require.Equal(t, "12:00–13:00 UTC: 50 received", rects[0].title)
	require.Contains(t, texts, "100", "the axis top")
	require.Contains(t, texts, "50")
	require.Contains(t, texts, "09:00", "hour labels")
	for _, outcome := range []string{"received", "acked", "failed", "dead-lettered", "rejected"} {
		require.Contains(t, texts, outcome, "the legend")
	}
	require.Contains(t, texts, "12:00–13:00 UTC: 50 received, 40 acked, 5 failed, 3 dead-lettered, 2 rejected", "a bar's tooltip")
}

func TestVolumeChartEmpty(t *testing.T) {
	for name, hours := range map[string][]store.VolumeHour{"none": nil, "zeros": day(nil)} {
		svg := string(VolumeChart("Webhooks per hour", hours))
		rects, texts := parseChart(t, svg)
		require.Empty(t, rects, name)
		require.Contains(t, texts, "no webhooks in these hours", name)
		require.NotContains(t, svg, "NaN", name)
		require.NotContains(t, svg, "Inf", name)
	}
}

func TestVolumeChartOneHugeHour(t *testing.T) {
	rects, texts := parseChart(t, string(VolumeChart("Webhooks per hour", day(map[int]store.VolumeHour{
		0:  {Received: 1},
		23: {Received: 9_000_000},
	}))))
	require.Len(t, rects, 2)
	require.InDelta(t, chartMinBar, rects[0].height, 0.01, "a single webhook beside millions stays visible")
	require.InDelta(t, plotHeight*0.9, rects[1].height, 0.5, "9M of a 10M axis")
	require.Contains(t, texts, "10,000,000")
	require.Contains(t, rects[1].title, "9,000,000 received")
}

func TestVolumeChartEscapesTitle(t *testing.T) {
	svg := string(VolumeChart(`Host <script>alert(1)</script> & "x"`, day(nil)))
	require.NotContains(t, svg, "<script>")
	_, texts := parseChart(t, svg)
	require.Contains(t, texts, `Host <script>alert(1)</script> & "x"`, "shown as text")
}

func TestNiceCeil(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 5, 7: 10, 10: 10, 11: 20, 101: 200, 499: 500, 501: 1000} {
		require.Equal(t, want, niceCeil(n), "n=%d", n)
	}
	require.Equal(t, "1,234,567", formatCount(1234567))
	require.Equal(t, "999", formatCount(999))
}
