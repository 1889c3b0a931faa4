package main

import (
	"testing"
	"time"
)

// TestAccountRuns: each run of an any delivery but the last is accounted
// for by its member's ledger (recorded there, the ack never taken: another
// member holds it acked) or by its member's SIGKILL before the next run;
// any other is a repeat the relay does not allow.
func TestAccountRuns(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a := &relayHost{name: "a", kills: []time.Time{at(5)}}
	b := &relayHost{name: "b"}
	c := &relayHost{name: "c", kills: []time.Time{at(30)}}
	ledgerOf := func(hs ...*relayHost) func(*relayHost) bool {
		return func(h *relayHost) bool {
			for _, x := range hs {
				if x == h {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name             string
		runs             []memberRun
		holder           *relayHost
		inLedger         func(*relayHost) bool
		ledger, kill     int
		unexplainedNames []string
	}{
		{"once", []memberRun{{b, at(1)}}, b, ledgerOf(b), 0, 0, nil},
		{"cut by a SIGKILL, run by another", []memberRun{{a, at(1)}, {b, at(8)}}, b, ledgerOf(b), 0, 1, nil},
		{"recorded, its ack never taken", []memberRun{{b, at(1)}, {a, at(8)}}, a, ledgerOf(a, b), 1, 0, nil},
		{"cut by a SIGKILL, run again by the same member", []memberRun{{a, at(1)}, {a, at(9)}}, a, ledgerOf(a), 0, 1, nil},
		{"the holder ran it twice, no kill between", []memberRun{{b, at(1)}, {b, at(2)}}, b, ledgerOf(b), 0, 0, []string{"b"}},
		{"run by another with no ledger row and no kill", []memberRun{{b, at(1)}, {a, at(2)}}, a, ledgerOf(a), 0, 0, []string{"b"}},
		{"killed after the next run: no account", []memberRun{{c, at(1)}, {b, at(10)}}, b, ledgerOf(b), 0, 0, []string{"c"}},
		{"three runs", []memberRun{{a, at(1)}, {b, at(7)}, {c, at(20)}}, c, ledgerOf(b, c), 1, 1, nil},
	} {
		l, k, bad := accountRuns(tc.runs, tc.holder, tc.inLedger)
		if l != tc.ledger || k != tc.kill {
			t.Errorf("%s: by ledger %d, by kill %d; want %d, %d", tc.name, l, k, tc.ledger, tc.kill)
		}
		var names []string
		for _, r := range bad {
			names = append(names, r.member.name)
		}
		if len(names) != len(tc.unexplainedNames) || (len(names) > 0 && names[0] != tc.unexplainedNames[0]) {
			t.Errorf("%s: unexplained %v, want %v", tc.name, names, tc.unexplainedNames)
		}
	}
}
