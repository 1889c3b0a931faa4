package handler

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
)

// TestForwardDropsHeadersTheClientRefuses: a provider header with a control
// character in its value, or a name that is no token, is left out and noted
// in the output; the webhook is still forwarded, with every valid header
// byte for byte and the relay's own headers escaped.
func TestForwardDropsHeadersTheClientRefuses(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	w := testWebhook(`{}`)
	w.DeliveryID = "stripe:evt_\x00x\ny%:1707912345000"
	w.Headers["x-nul"] = "a\x00b"
	w.Headers["x-split"] = "a\r\nX-Injected: 1"
	w.Headers["x-del"] = "a\x7fb"
	w.Headers["bad name"] = "v"
	w.Headers["x-kept"] = "caf\xc3\xa9\tand \xff obs-text "
	out := newForward(t, srv.URL, nil).Handle(context.Background(), Job{Webhook: w})
	require.True(t, out.OK, out.Error)
	require.Equal(t, `relay: provider headers not forwarded, their names or values are not valid in HTTP: "bad name", "x-del", "x-nul", "x-split"`+
		"\nok", out.Output)

	r := <-got
	require.Equal(t, "caf\xc3\xa9\tand \xff obs-text", r.Header.Get("X-Kept"), "valid values stay the provider's bytes")
	for _, name := range []string{"X-Nul", "X-Split", "X-Injected", "X-Del", "Bad name"} {
		require.NotContains(t, r.Header, name)
	}
	require.Equal(t, "stripe:evt_%00x%0Ay%25:1707912345000", r.Header.Get(shared.HeaderDeliveryID))
	require.Equal(t, r.Header.Get(shared.HeaderDeliveryID), r.Header.Get(shared.HeaderIdempotencyKey))
	require.Equal(t, "abc123", r.Header.Get("X-GitHub-Delivery"))
}

// TestForwardNoteKeepsOutputBounded: the note and a long answer together
// stay within MaxOutput (and the cut's mark).
func TestForwardNoteKeepsOutputBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		io.WriteString(w, strings.Repeat("e", 10000))
	}))
	t.Cleanup(srv.Close)
	w := testWebhook(`{}`)
	for i := range 50 {
		w.Headers[strings.Repeat("x", 60)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "\x00"
	}
	out := newForward(t, srv.URL, nil).Handle(context.Background(), Job{Webhook: w})
	require.False(t, out.OK)
	require.True(t, strings.HasPrefix(out.Output, "relay: provider headers not forwarded"))
	require.Contains(t, out.Output, "\neee")
	require.LessOrEqual(t, len(out.Output), MaxOutput+len("…"))
}

func TestSafeID(t *testing.T) {
	require.Equal(t, "github:abc-123:1707912345000", safeID("github:abc-123:1707912345000"))
	require.Equal(t, "a%00b%0D%0A%7F%25%09", safeID("a\x00b\r\n\x7f%\t"))
	require.NotEqual(t, safeID("a\x00"), safeID("a%00"), "escaping keeps different ids different")
	require.LessOrEqual(t, len(safeID(strings.Repeat("\x00", 200<<10))), maxEnvValue)
	require.LessOrEqual(t, len(safeID(strings.Repeat("a", 200<<10))), maxEnvValue)
}

// TestEnvIsBounded: whatever a webhook carries, the job's variables hold no
// NUL, no value over maxEnvValue, and no more than maxJobEnv in all; the
// fixed variables are always there.
func TestEnvIsBounded(t *testing.T) {
	w := testWebhook(`{}`)
	w.DeliveryID = "github:" + strings.Repeat("d", 200<<10) + "\x00:1"
	w.EventType = "push\x00" + strings.Repeat("t", 10000)
	w.EventAction = strings.Repeat("ü", 3000)
	fields := map[string]string{}
	for i := range 100 {
		fields["github.f"+strings.Repeat("x", i)] = strings.Repeat("v\x00", 2000)
	}
	env := Env(Job{Webhook: w, Summary: summary.Summary{Text: strings.Repeat("s", 200<<10), Fields: fields}})
	total := 0
	names := map[string]string{}
	for _, kv := range env {
		require.NotContains(t, kv, "\x00")
		name, v, _ := strings.Cut(kv, "=")
		require.LessOrEqual(t, len(v), maxEnvValue, name)
		names[name] = v
		total += len(kv) + 1
	}
	require.LessOrEqual(t, total, maxJobEnv)
	for _, name := range []string{"RELAY_DELIVERY_ID", "RELAY_SOURCE", "RELAY_EVENT_TYPE", "RELAY_EVENT_ACTION",
		"RELAY_ATTEMPT", "RELAY_CORRELATION_ID", "IDEMPOTENCY_KEY", "RELAY_SUMMARY"} {
		require.Contains(t, names, name)
	}
	require.Equal(t, names["RELAY_DELIVERY_ID"], names["IDEMPOTENCY_KEY"])
	require.True(t, strings.HasPrefix(names["RELAY_EVENT_TYPE"], "pusht"))
	require.Equal(t, strings.Repeat("ü", maxEnvValue/2), names["RELAY_EVENT_ACTION"], "cut on a character boundary")
	require.Greater(t, len(env), 8, "the fields that fit are kept")
}
