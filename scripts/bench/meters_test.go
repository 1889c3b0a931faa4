package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// TestIOFiguresText: the blocks read are shown a webhook, most first, the
// total before them; unknown figures show as "–".
func TestIOFiguresText(t *testing.T) {
	f := ioFigures{n: 100, rels: []rig.RelReads{{Name: "deliveries_event_idx", Blocks: 98}, {Name: "deliveries", Blocks: 20}, {Name: "x", Blocks: 1}}}
	require.Equal(t, "1.19 in all, deliveries_event_idx 0.98, deliveries 0.20", f.blocksText(2))
	require.Equal(t, "–", ioFigures{n: 100}.blocksText(2))
	require.Equal(t, "–", ioFigures{rels: f.rels}.blocksText(2))
	require.Equal(t, "7 %", percent(0.07))
	require.Equal(t, "–", percent(-1))
}

// TestSustainedText: a window with nothing accepted shows "–", the others
// their figure, in order.
func TestSustainedText(t *testing.T) {
	ws := []intakeRow{{res: loadResult{OK: 10, Rate: 2445}}, {}, {res: loadResult{OK: 5, Rate: 2404.4}}}
	got := sustainedText(ws, func(w intakeRow) string { return cpuSplit(w.res.Rate) })
	require.Equal(t, "2445; –; 2404", got)
	require.Equal(t, "–", sustainedText(nil, nil))
}
