package steptime

import (
	"testing"
	"time"
)

func TestStampOffLeavesHeadersAlone(t *testing.T) {
	enabled = false
	h := map[string]string{}
	Stamp(h, "leased", time.Now())
	if len(h) != 0 || !Now().IsZero() {
		t.Fatalf("stamped while off: %v", h)
	}
}

func TestStampParseRoundTrip(t *testing.T) {
	enabled = true
	defer func() { enabled = false }()
	a, b := time.Unix(1, 5), time.Unix(2, 7)
	h := map[string]string{}
	Stamp(h, "leased", a)
	Stamp(h, "encoded", b)
	Stamp(h, "skipped", time.Time{}) // zero: left out
	Stamp(nil, "x", a)               // nil headers: no panic
	got := Parse(h[Header] + ",junk,bad=x")
	if len(got) != 2 || got[0].Name != "leased" || !got[0].At.Equal(a) || got[1].Name != "encoded" || !got[1].At.Equal(b) {
		t.Fatalf("parsed %+v from %q", got, h[Header])
	}
}
