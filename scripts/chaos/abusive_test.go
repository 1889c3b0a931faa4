package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// seen is what the test server saw of one request.
type seen struct {
	remote   string // source address
	segments []string
	headers  int
	body     int64
}

// TestAttacksReachTheHandler sends one request of every kind that is not
// slow to a Go server set as `cloud serve` sets its (MaxHeaderBytes 1 MiB):
// each must get past Go's own limits to the handler — a 1 MB path segment,
// 131,072 header names, whole bodies — from its own loopback address, and
// read the handler's answer.
func TestAttacksReachTheHandler(t *testing.T) {
	var mu sync.Mutex
	var got []seen
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{MaxHeaderBytes: 1 << 20, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		got = append(got, seen{remote: host, segments: strings.Split(r.URL.Path, "/"), headers: len(r.Header), body: n})
		mu.Unlock()
		w.WriteHeader(401)
	})}
	go srv.Serve(l)
	defer srv.Close()
	addr := l.Addr().String()
	if err := canBind(attackIP(0, 0), addr); err != nil {
		t.Skipf("cannot connect from another loopback address: %v", err)
	}

	const hostID = "h_realhost"
	tgt := newAbuseTarget(addr, hostID)
	want := map[string]func(s seen) bool{
		"long-host-ids": func(s seen) bool {
			return len(s.segments) == 5 && len(s.segments[3]) == longSegment && s.segments[4] == "github"
		},
		"long-source-names": func(s seen) bool {
			return len(s.segments) == 5 && s.segments[3] == hostID && len(s.segments[4]) == longSegment
		},
		"unsigned-1MiB":  func(s seen) bool { return s.segments[3] == hostID && s.body == 1<<20 },
		"unsigned-25MiB": func(s seen) bool { return s.segments[3] == hostID && s.body == 25<<20 },
		"header-flood":   func(s seen) bool { return s.segments[3] == hostID && s.headers >= 131_072 },
		"claim-guess":    func(s seen) bool { return strings.Join(s.segments, "/") == "/api/hosts/claim" },
		"token-junk":     func(s seen) bool { return strings.Join(s.segments, "/") == "/api/hosts/token" },
	}
	ctx := context.Background()
	for ki, k := range abuseKinds(tgt) {
		if k.slow {
			continue
		}
		check, ok := want[k.name]
		if !ok {
			t.Errorf("%s: no check", k.name)
			continue
		}
		a := &attacker{src: attackIP(ki, 1), addr: addr, rng: rand.New(rand.NewPCG(1, uint64(ki)))}
		// Twice: the second request goes on the kept-alive connection.
		for range 2 {
			mu.Lock()
			got = nil
			mu.Unlock()
			outcome, _ := k.hit(ctx, a)
			mu.Lock()
			s := got
			mu.Unlock()
			if outcome != "401" || len(s) != 1 {
				t.Fatalf("%s: outcome %q, %d requests seen", k.name, outcome, len(s))
			}
			if s[0].remote != attackIP(ki, 1).String() {
				t.Errorf("%s: from %s, want %s", k.name, s[0].remote, attackIP(ki, 1))
			}
			if !check(s[0]) {
				t.Errorf("%s: the server saw %d segments (lengths %v), %d headers, %d body bytes", k.name,
					len(s[0].segments), lengths(s[0].segments), s[0].headers, s[0].body)
			}
		}
		a.close()
	}
}

// TestClaimGuessShape: guesses look like claim codes, so the cloud takes
// them to the store rather than refusing them as malformed.
func TestClaimGuessShape(t *testing.T) {
	code := regexp.MustCompile(`^\{"claim_code":"[0-9A-HJKMNP-TV-Z]{4}(-[0-9A-HJKMNP-TV-Z]{4}){3}"\}$`)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bodies := make(chan string, 10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.WriteHeader(401)
	})}
	go srv.Serve(l)
	defer srv.Close()
	tgt := newAbuseTarget(l.Addr().String(), "h_x")
	a := &attacker{src: net.IPv4(127, 0, 0, 1), addr: l.Addr().String(), rng: rand.New(rand.NewPCG(1, 2))}
	defer a.close()
	prev := ""
	for range 5 {
		if outcome, _ := tgt.claimGuess(context.Background(), a); outcome != "401" {
			t.Fatalf("outcome %q", outcome)
		}
		b := <-bodies
		if !code.MatchString(b) || b == prev {
			t.Fatalf("guess %s (previous %s)", b, prev)
		}
		prev = b
	}
}

func lengths(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s)
	}
	return out
}
