package verify

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

var safeIDRE = regexp.MustCompile(`^[A-Za-z0-9._~:@+=/-]{1,128}$`)

func TestSafeEventID(t *testing.T) {
	for _, id := range []string{
		"evt_1NG8Du2eZvKYlo2CUI1ZZbi4", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "Ev0001ABCD",
		"398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
		"10000", "SM123:delivered", "a/b", "dGVzdA+/=", "user@example.com~1", strings.Repeat("x", 128),
	} {
		require.Equal(t, id, SafeEventID(id), "a safe id is kept as sent")
	}
	unsafe := []string{
		"evt_\x00x\ny", "evt 1", "a\tb", "\x1b[31mred", "ü", "a\\b", `a"b`, "a%2Fb", "a?b", "a#b",
		strings.Repeat("x", 129), strings.Repeat("7", 200<<10), "",
	}
	seen := map[string]string{}
	for _, id := range unsafe {
		got := SafeEventID(id)
		require.Regexp(t, `^h-[0-9a-f]{32}$`, got, "%q", id)
		require.Regexp(t, safeIDRE, got)
		require.Equal(t, got, SafeEventID(id), "the same id gives the same safe id: retries stay duplicates")
		require.NotContains(t, seen, got, "%q and %q", id, seen[got])
		seen[got] = id
		require.Equal(t, got, SafeEventID(got), "a safe id is its own")
	}
}

func TestSafeText(t *testing.T) {
	require.Equal(t, "pull_request", SafeText("pull_request", 128))
	require.Equal(t, "ab[31mc", SafeText("a\x00b\x1b[31mc\n\r\u0085", 128), "C0, C1 and DEL are dropped")
	require.Equal(t, "a\uFFFDb", SafeText("a\xffb", 128), "invalid UTF-8 replaced")
	require.Equal(t, "日本", SafeText("日本語", 8), "cut on a character boundary")
	require.Equal(t, strings.Repeat("a", 128), SafeText(strings.Repeat("a", 300), 128))
}

// TestEventOfStripeControlID: a signed Stripe event whose id and type carry
// NUL, newline and a terminal escape is named by a safe id, the same one on
// every retry, and a type without the control characters.
func TestEventOfStripeControlID(t *testing.T) {
	p, _ := Lookup("stripe")
	body := []byte(`{"id":"evt_\u0000x\ny","object":"event","type":"invoice.paid\u001b[2J"}`)
	secret := []byte("whsec_abc")
	ts := unix(testNow)
	r := request(map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + stripeSig(secret, ts, body)}, body)
	require.NoError(t, p.Verify(r, [][]byte{secret}, nil))
	require.Equal(t, "evt_\x00x\ny", p.Event(r, nil).ID, "the provider's id as sent")

	ev := EventOf(p, r, nil)
	require.Equal(t, SafeEventID("evt_\x00x\ny"), ev.ID)
	require.Regexp(t, `^h-[0-9a-f]{32}$`, ev.ID)
	require.Equal(t, "invoice.paid[2J", ev.Type)
	require.Equal(t, ev, EventOf(p, r, nil))
}

func TestEventOfLongAndSlashedIDs(t *testing.T) {
	gh, _ := Lookup("github")
	long := strings.Repeat("d", 200<<10)
	ev := EventOf(gh, request(map[string]string{"X-GitHub-Delivery": long, "X-GitHub-Event": "push"}, []byte(`{}`)), nil)
	require.Equal(t, SafeEventID(long), ev.ID, "a 200 KB X-GitHub-Delivery becomes 34 bytes")
	require.Equal(t, "push", ev.Type)

	ev = EventOf(gh, request(map[string]string{"X-GitHub-Delivery": "x", "X-GitHub-Event": strings.Repeat("e", 1000)}, []byte(`{"action":"a\u0000b"}`)), nil)
	require.Len(t, ev.Type, shared.MaxEventName)
	require.Equal(t, "ab", ev.Action)

	gen, _ := Lookup("generic")
	ev = EventOf(gen, request(map[string]string{"X-Event-Id": "a/b"}, []byte(`{}`)), nil)
	require.Equal(t, "a/b", ev.ID)
}

// eachValidVector calls fn with every vector that verifies: where it is
// (file/name), its provider and its request; it returns how many.
func eachValidVector(t *testing.T, fn func(where string, p Provider, r *Request)) int {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	n := 0
	for _, file := range files {
		for _, v := range loadVectors(t, filepath.Base(file)) {
			if v.Expect == "invalid" {
				continue
			}
			p, ok := Lookup(v.Provider)
			require.True(t, ok)
			fn(file+"/"+v.Name, p, vectorRequest(t, v))
			n++
		}
	}
	return n
}

// TestEventOfKeepsEveryVectorID: every real provider id in the vectors is a
// safe id already, so EventOf changes none of them (dedupe keys of stored
// deliveries stay what they were).
func TestEventOfKeepsEveryVectorID(t *testing.T) {
	n := eachValidVector(t, func(where string, p Provider, r *Request) {
		want := p.Event(r, nil)
		require.Equal(t, want, EventOf(p, r, nil), where)
		require.Regexp(t, safeIDRE, want.ID)
	})
	require.Greater(t, n, 20)
}

// TestActionsAsEventsSayThem: no event of a provider that says its events
// carry no action (Actions) has one, over every vector (the fuzz targets
// check it of every body they make). The hosts' comparison of their
// events with a source's filter reads it (shared.HostSource.Actions).
func TestActionsAsEventsSayThem(t *testing.T) {
	withAction := map[string]bool{}
	eachValidVector(t, func(where string, p Provider, r *Request) {
		if ev := p.Event(r, nil); ev.Action != "" {
			require.True(t, p.Actions(), "%s: %+q", where, ev)
			withAction[p.Name()] = true
		}
	})
	require.NotEmpty(t, withAction)
}
