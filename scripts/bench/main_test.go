package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be a floor's client, as the bench binary is.
func TestMain(m *testing.M) {
	runAsClient(os.Args)
	os.Exit(m.Run())
}

// TestLatencyFloor measures a short floor for real: every request crosses
// to the receiver with its send time, every write is synced.
func TestLatencyFloor(t *testing.T) {
	b := &bench{ctx: context.Background(), work: t.TempDir(), cfg: &config{e2eDuration: 100 * time.Millisecond, payloads: "installation"}}
	row := b.latencyFloor(200)
	require.Empty(t, row.err)
	require.Len(t, row.hop.sorted, 20)
	require.Len(t, row.commit.sorted, 20)
	require.Positive(t, row.hop.at(0.5))
	require.Positive(t, row.commit.at(0.5))

	b.work = filepath.Join(t.TempDir(), "missing")
	require.Contains(t, b.latencyFloor(200).err, "commit-floor")
}

// TestParseFlagsQuickOut: a full run writes BENCHMARKS.md; a -quick run only
// prints its report (its figures are not the committed ones) unless -out
// names a file.
func TestParseFlagsQuickOut(t *testing.T) {
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{nil, "BENCHMARKS.md"},
		{[]string{"-quick"}, "-"},
		{[]string{"-quick", "-out", "quick.md"}, "quick.md"},
		{[]string{"-quick", "-out", "BENCHMARKS.md"}, "BENCHMARKS.md"},
		{[]string{"-out", "-"}, "-"},
	} {
		c, err := parseFlags(tc.args)
		require.NoError(t, err, "%q", tc.args)
		require.Equal(t, tc.out, c.out, "%q", tc.args)
	}
}

// TestParseFlagsQuick: -quick shortens what no flag set, and explicit flags
// still win.
func TestParseFlagsQuick(t *testing.T) {
	c, err := parseFlags([]string{"-quick", "-drain", "777"})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.intakeDuration)
	require.Equal(t, 777, c.drainN)

	_, err = parseFlags([]string{"-quick", "extra"})
	require.ErrorContains(t, err, "unexpected arguments")
}

// TestParseFlagsScale: -scale takes sizes from 0 up, -quick makes them
// small unless they are given, and what is not a size is refused;
// -scale-store goes with SQLite alone.
func TestParseFlagsScale(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		sizes []int
	}{
		{nil, []int{0, 100000}},
		{[]string{"-quick"}, []int{0, 5000}},
		{[]string{"-quick", "-scale", "0,1_000_000"}, []int{0, 1000000}},
		{[]string{"-scale", "5000000, 10000000"}, []int{5000000, 10000000}},
	} {
		c, err := parseFlags(tc.args)
		require.NoError(t, err, "%q", tc.args)
		require.Equal(t, tc.sizes, c.scaleSizes, "%q", tc.args)
	}
	for _, bad := range []string{"-1", "1M", "x"} {
		_, err := parseFlags([]string{"-scale", bad})
		require.ErrorContains(t, err, "-scale", bad)
	}
	// A kept store is SQLite's, measured alone.
	_, err := parseFlags([]string{"-scale-store", "/tmp/kept"})
	require.ErrorContains(t, err, "-scale-store")
	c, err := parseFlags([]string{"-engines", "sqlite", "-scale-store", "/tmp/kept"})
	require.NoError(t, err)
	require.Equal(t, "/tmp/kept", c.scaleStore)
	require.Equal(t, "1,000,000", thousands(1000000))
	require.Equal(t, "0", thousands(0))
	require.Equal(t, "20,000", thousands(20000))
}

// TestKeptSections: regenerating the report keeps what other benchmarks
// wrote below the marker, and nothing when there is no marker or file.
func TestKeptSections(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "BENCHMARKS.md")
	if got := keptSections(path); got != "" {
		t.Fatalf("no file: got %q", got)
	}
	if err := os.WriteFile(path, []byte("# old figures\n\nno marker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptSections(path); got != "" {
		t.Fatalf("no marker: got %q", got)
	}
	kept := keptMarker + "\n\n## Alert evaluation\n\n35 ms\n"
	if err := os.WriteFile(path, []byte("# old figures\n\n"+kept), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptSections(path); got != "\n"+kept {
		t.Fatalf("got %q, want %q", got, "\n"+kept)
	}
}

func TestGoMemoryOf(t *testing.T) {
	metrics := "# HELP go_memstats_sys_bytes x\n# TYPE go_memstats_sys_bytes gauge\n" +
		"go_memstats_heap_inuse_bytes 2.015232e+07\ngo_memstats_sys_bytes 5.653532e+07\ngo_memstats_heap_released_bytes 3.2210944e+07\n"
	if got, want := goMemoryOf(metrics), int64(56535320-32210944); got != want {
		t.Fatalf("goMemoryOf = %d, want %d", got, want)
	}
	if got := goMemoryOf("go_memstats_sys_bytes 1\n"); got != 0 {
		t.Fatalf("without released: %d, want 0 (unknown)", got)
	}
	if got := (memSplit{file: 26 << 20, goMem: 30 << 20, other: 17 << 20}).String(); got != "26 / 30 / 17" {
		t.Fatalf("String = %q", got)
	}
	if got := (memSplit{}).String(); got != "–" {
		t.Fatalf("unknown: %q", got)
	}
}
