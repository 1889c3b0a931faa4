package rig

import (
	"os"
	"slices"
	"testing"
)

func TestParseMachineCPU(t *testing.T) {
	from, err := parseMachineCPU("cpu  100 5 50 800 40 1 4 0 0 0")
	if err != nil {
		t.Fatal(err)
	}
	if from.Total != 1000 || from.Idle != 800 || from.IOWait != 40 {
		t.Fatalf("parsed %+v", from)
	}
	to, _ := parseMachineCPU("cpu  400 5 150 1200 240 1 4 0 0 0")
	idle, iowait := to.Shares(from)
	if idle != 0.4 || iowait != 0.2 {
		t.Fatalf("shares %v %v, want 0.4 0.2", idle, iowait)
	}
	if idle, iowait := from.Shares(from); idle != -1 || iowait != -1 {
		t.Fatalf("no time passed: %v %v", idle, iowait)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := parseMachineCPU(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if m, err := ReadMachineCPU(); err != nil || m.Total == 0 {
		t.Fatalf("this machine: %+v %v", m, err)
	}
}

func TestPGReadsSince(t *testing.T) {
	from := PGReads{Blocks: map[string]int64{"a": 10, "b": 5, "c": 7}, BackendWrites: 3}
	to := PGReads{Blocks: map[string]int64{"a": 12, "b": 25, "c": 7, "d": 2}, BackendWrites: 9}
	rels, bw := to.Since(from)
	want := []RelReads{{"b", 20}, {"a", 2}, {"d", 2}}
	if !slices.Equal(rels, want) || bw != 6 {
		t.Fatalf("since: %v %d, want %v 6", rels, bw, want)
	}
	to.BackendWrites = -1
	if _, bw := to.Since(from); bw != -1 {
		t.Fatalf("unknown backend writes read %d", bw)
	}
}

func TestTreeReadBytes(t *testing.T) {
	if n, err := TreeReadBytes(os.Getpid()); err != nil || n < 0 {
		t.Fatalf("read bytes %d (%v)", n, err)
	}
	if _, err := TreeReadBytes(-1); err == nil {
		t.Fatal("no error for pid -1")
	}
}
