package verify

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLinearTimestamps(t *testing.T) {
	p, _, r, secret := verifiedVector(t, "linear", "comment-create-valid")

	// The body's webhookTimestamp is signed; the header is not. A replay
	// with a fresh header is still caught by the body.
	replay := *r
	replay.Now = r.Now.Add(time.Hour)
	replay.Header = r.Header.Clone()
	replay.Header.Set("Linear-Timestamp", strconv.FormatInt(replay.Now.UnixMilli(), 10))
	err := p.Verify(&replay, secret, nil)
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "webhookTimestamp")

	// The body alone is enough.
	bodyOnly := *r
	bodyOnly.Header = r.Header.Clone()
	bodyOnly.Header.Del("Linear-Timestamp")
	require.NoError(t, p.Verify(&bodyOnly, secret, nil))
	bodyOnly.Now = time.UnixMilli(1700000000123 + 60001)
	require.ErrorIs(t, p.Verify(&bodyOnly, secret, nil), ErrStale, "milliseconds count")
	bodyOnly.Now = time.UnixMilli(1700000000123 + 60000)
	require.NoError(t, p.Verify(&bodyOnly, secret, nil))
	bodyOnly.Now = time.UnixMilli(1700000000123 - 60001)
	require.ErrorIs(t, p.Verify(&bodyOnly, secret, nil), ErrStale, "the future is refused too")

	// A header given in seconds is far in the past.
	s := signers["linear"]
	sec := s.request(0, s.body, testNow)
	sec.Header.Set("Linear-Timestamp", unix(testNow))
	require.ErrorIs(t, p.Verify(sec, [][]byte{s.secrets[0]}, nil), ErrStale)
	sec.Header.Set("Linear-Timestamp", "1.7e12")
	require.ErrorIs(t, p.Verify(sec, [][]byte{s.secrets[0]}, nil), ErrMalformed)
	sec.Header.Del("Linear-Timestamp")
	require.ErrorIs(t, p.Verify(sec, [][]byte{s.secrets[0]}, nil), ErrMalformed, "no timestamp at all")
}

func TestLinearEvent(t *testing.T) {
	p, _ := Lookup("linear")
	_, r := findVector(t, "linear.json", "comment-create-valid")
	require.Equal(t, Event{ID: "0e1d2c3b-4a59-4687-9a8b-7c6d5e4f3a2b", Type: "Comment", Action: "create"}, p.Event(r, nil))
	h := request(map[string]string{"Linear-Event": "Issue"}, []byte(`{"action":"remove"}`))
	require.Equal(t, Event{ID: BodyHashID(h.Body), Type: "Issue", Action: "remove"}, p.Event(h, nil))
}
