package shared

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testHooks are webhooks with an empty body, a binary one (every byte
// value, not valid UTF-8), a JSON one and a 300 KB one.
func testHooks() []Webhook {
	bin := make([]byte, 512)
	for i := range bin {
		bin[i] = byte(i)
	}
	big := bytes.Repeat([]byte(`{"commits":["a\u00e9\"<>&"]}`), 300<<10/27)
	at := time.Date(2026, 11, 27, 12, 0, 0, 123, time.UTC)
	return []Webhook{
		{DeliveryID: "github:1:1", Source: "github", EventType: "ping", Headers: map[string]string{}, RawBody: []byte{}, ReceivedAt: at, Attempt: 1},
		{DeliveryID: "stripe:2:1", Source: "stripe", EventType: "invoice", EventAction: "paid",
			Headers: map[string]string{"Stripe-Signature": "t=1,v1=ab", "X-Odd": "é\"\\\n<&>"}, RawBody: bin, ReceivedAt: at, Attempt: 3, CorrelationID: "c-1"},
		{DeliveryID: "github:3:1", Source: "github", EventType: "push", Headers: map[string]string{"X-GitHub-Event": "push"},
			Body: json.RawMessage(`{"a":1}`), RawBody: []byte(`{"a":1}`), ReceivedAt: at, Attempt: 1},
		{DeliveryID: "github:4:1", Source: "github", EventType: "push", Headers: map[string]string{"X-GitHub-Event": "push"}, RawBody: big, ReceivedAt: at, Attempt: 2},
	}
}

// binaryAppended checks that msg is "kept" followed by one binary message of
// the 8-byte header layout, whole, and returns that message, its JSON and
// its bodies' length.
func binaryAppended(t *testing.T, msg []byte) (m, js []byte, bodies int) {
	t.Helper()
	require.Equal(t, "kept", string(msg[:4]), "appended to dst")
	m = msg[4:]
	j := int(binary.BigEndian.Uint32(m))
	bodies = int(binary.BigEndian.Uint32(m[4:]))
	require.Equal(t, len(m), WebhooksFrameHeader+j+bodies)
	return m, m[WebhooksFrameHeader : WebhooksFrameHeader+j], bodies
}

func TestWebhooksFrameRoundTrip(t *testing.T) {
	hooks := testHooks()
	prefix := []byte("kept")
	msg, err := AppendWebhooksFrame(prefix, hooks)
	require.NoError(t, err)
	msg, js, b := binaryAppended(t, msg)
	require.Equal(t, 512+7+len(hooks[3].RawBody), b)
	require.True(t, json.Valid(js))
	require.NotContains(t, string(js), `"raw_body"`)

	got, err := DecodeWebhooksFrame(msg, nil)
	require.NoError(t, err)
	require.Len(t, got, len(hooks))
	for i := range hooks {
		require.Equal(t, hooks[i].RawBody, got[i].RawBody, "body %d byte-exact", i)
		require.NotNil(t, got[i].RawBody)
		require.Equal(t, hooks[i], got[i])
	}
	// The bodies are msg's bytes, each capped at its end.
	require.Equal(t, &msg[len(msg)-len(hooks[3].RawBody)], &got[3].RawBody[0])
	require.Equal(t, len(got[1].RawBody), cap(got[1].RawBody))

	// The same webhooks as the text frame carries them.
	text, err := json.Marshal(Frame{Type: FrameWebhooks, Webhooks: hooks})
	require.NoError(t, err)
	var f Frame
	require.NoError(t, json.Unmarshal(text, &f))
	require.Equal(t, f.Webhooks, got)
	t.Logf("text frame %d bytes, binary %d", len(text), len(msg))
}

// binaryMessage is a binary message of the given JSON and bodies, its
// header saying bodyLen bytes of bodies.
func binaryMessage(js string, bodies string, bodyLen int) []byte {
	m := binary.BigEndian.AppendUint32(nil, uint32(len(js)))
	m = binary.BigEndian.AppendUint32(m, uint32(bodyLen))
	return append(append(m, js...), bodies...)
}

// withUint32 is a copy of msg with v written at off.
func withUint32(msg []byte, off int, v uint32) []byte {
	m := bytes.Clone(msg)
	binary.BigEndian.PutUint32(m[off:], v)
	return m
}

// refusal is a malformed binary message and what its refusal says.
type refusal struct {
	msg  []byte
	want string
}

// layoutRefusals are the messages of the 8-byte header layout that any
// binary message refuses, made from good, a valid one.
func layoutRefusals(good []byte) map[string]refusal {
	set := func(off int, v uint32) []byte { return withUint32(good, off, v) }
	return map[string]refusal{
		"empty":            {nil, "shorter than its 8-byte header"},
		"short header":     {good[:5], "shorter than its 8-byte header"},
		"truncated":        {good[:len(good)-1], "more than"},
		"trailing byte":    {append(bytes.Clone(good), 0), "the message is"},
		"json too long":    {set(0, uint32(len(good))), "more than"},
		"bodies too short": {set(4, 1), "the message is"},
		"no json":          {binaryMessage("", "", 0), "no JSON"},
	}
}

func TestWebhooksFrameRefused(t *testing.T) {
	good, err := AppendWebhooksFrame(nil, testHooks()[:3])
	require.NoError(t, err)
	j := int(binary.BigEndian.Uint32(good))
	part := binaryMessage
	set := func(off int, v uint32) []byte { return withUint32(good, off, v) }
	cases := layoutRefusals(good)
	maps.Copy(cases, map[string]refusal{
		"json 4 GiB":     {set(0, 1<<32-1), "more than"},
		"malformed json": {part(`{"type":"webhooks","webhooks":[`, "", 0), "malformed JSON"},
		"json cut": {func() []byte {
			m := set(0, uint32(j-1))
			binary.BigEndian.PutUint32(m[4:], binary.BigEndian.Uint32(m[4:])+1)
			return m
		}(), "malformed JSON"},
		"not webhooks":     {part(`{"type":"confirm"}`, "", 0), `type "confirm"`},
		"no length":        {part(`{"type":"webhooks","webhooks":[{"delivery_id":"a"}]}`, "", 0), "has no raw_body_len"},
		"negative length":  {part(`{"type":"webhooks","webhooks":[{"raw_body_len":-1},{"raw_body_len":2}]}`, "x", 1), "out of range"},
		"length too large": {part(`{"type":"webhooks","webhooks":[{"raw_body_len":3}]}`, "xy", 2), "out of range"},
		"lengths short":    {part(`{"type":"webhooks","webhooks":[{"raw_body_len":1}]}`, "xy", 2), "add up to 1"},
		"huge length":      {part(`{"type":"webhooks","webhooks":[{"raw_body_len":99999999999999999999}]}`, "", 0), "malformed JSON"},
		"length not int":   {part(`{"type":"webhooks","webhooks":[{"raw_body_len":"1"}]}`, "x", 1), "malformed JSON"},
	})
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeWebhooksFrame(c.msg, nil)
			require.ErrorIs(t, err, ErrBadFrame)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, _, err = WebhooksFrameSizes(good, len(good)-1)
	require.ErrorContains(t, err, "more than")
}

// FuzzDecodeWebhooksFrame: any message is decoded or refused with
// ErrBadFrame, never a panic; what decodes encodes again to the same
// webhooks, and the bodies are exactly the message's last bytes.
//
//	go test -run '^$' -fuzz FuzzDecodeWebhooksFrame -fuzztime 30s ./shared/
func FuzzDecodeWebhooksFrame(f *testing.F) {
	hooks := testHooks()
	for i := range hooks {
		m, err := AppendWebhooksFrame(nil, hooks[i:min(i+2, len(hooks))])
		require.NoError(f, err)
		if len(m) < 4<<10 {
			f.Add(m)
		}
	}
	empty, _ := AppendWebhooksFrame(nil, nil)
	f.Add(empty)
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 1, '{', '}', 'x'})
	f.Add([]byte(`{"type":"webhooks"}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, err := DecodeWebhooksFrame(msg, nil)
		if err != nil {
			require.ErrorIs(t, err, ErrBadFrame)
			return
		}
		total := 0
		for _, w := range got {
			total += len(w.RawBody)
		}
		b := int(binary.BigEndian.Uint32(msg[4:]))
		require.Equal(t, b, total)
		var bodies []byte
		for _, w := range got {
			bodies = append(bodies, w.RawBody...)
		}
		require.True(t, bytes.Equal(msg[len(msg)-b:], bodies))
		again, err := AppendWebhooksFrame(nil, got)
		require.NoError(t, err)
		got2, err := DecodeWebhooksFrame(again, nil)
		require.NoError(t, err)
		require.Equal(t, len(got), len(got2))
		for i := range got {
			require.True(t, bytes.Equal(got[i].RawBody, got2[i].RawBody))
			require.Equal(t, got[i].DeliveryID, got2[i].DeliveryID)
		}
	})
}

// mixHooks is a frame of n webhooks of the bench's payload mix
// (scripts/bench/testdata, weighted as scripts/bench/mix.go; 1 in 100 a
// 300 KB push), with the headers the cloud sends.
func mixHooks(tb testing.TB, n int) []Webhook {
	tb.Helper()
	files := []struct {
		name   string
		weight int
	}{
		{"github/push.json", 190}, {"github/push.300k", 10}, {"github/pull_request.opened.json", 80},
		{"github/issues.opened.json", 40}, {"github/issue_comment.created.json", 80}, {"github/check_run.completed.json", 150},
		{"github/check_suite.completed.json", 80}, {"github/workflow_run.completed.json", 90}, {"github/release.published.json", 10},
		{"github/installation.created.json", 20}, {"github/ping.json", 10}, {"stripe/payment_intent.succeeded.json", 80},
		{"stripe/invoice.paid.json", 60}, {"stripe/customer.updated.json", 70}, {"stripe/plan.created.json", 30},
	}
	var pick []int
	var bodies [][]byte
	for i, f := range files {
		var body []byte
		if f.name == "github/push.300k" {
			push, err := os.ReadFile(filepath.Join("..", "scripts", "bench", "testdata", "github", "push.json"))
			require.NoError(tb, err)
			body = append(push[:len(push)-1:len(push)-1], []byte(`,"padding":"`+string(bytes.Repeat([]byte("x"), 300<<10-len(push)-14))+`"}`)...)
		} else {
			var err error
			body, err = os.ReadFile(filepath.Join("..", "scripts", "bench", "testdata", f.name))
			require.NoError(tb, err)
		}
		bodies = append(bodies, body)
		for range f.weight {
			pick = append(pick, i)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
	pick[0] = 1 // one big push in each frame, as 1 in 100
	hooks := make([]Webhook, n)
	for i := range hooks {
		body := bodies[pick[i%len(pick)]]
		if i > 0 && pick[i%len(pick)] == 1 {
			body = bodies[0]
		}
		hooks[i] = Webhook{DeliveryID: "github:" + strconv.Itoa(i) + "-6f1c2d3e-8a9b-4c5d-9e0f-1a2b3c4d5e6f:1", Source: "github", EventType: "push",
			Headers: map[string]string{
				"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/a1b2c3d", "X-GitHub-Delivery": "6f1c2d3e-8a9b-4c5d-9e0f-1a2b3c4d5e6f",
				"X-GitHub-Event": "push", "X-GitHub-Hook-ID": "123456789", "X-Hub-Signature-256": "sha256=" + base64.RawStdEncoding.EncodeToString(body[:32]),
				"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			},
			RawBody: body, ReceivedAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), Attempt: 1, CorrelationID: "6f1c2d3e-8a9b-4c5d-9e0f-1a2b3c4d5e6f"}
	}
	return hooks
}

// BenchmarkWebhooksFrame encodes and decodes a frame of 100 webhooks of the
// payload mix (1.5 MB of bodies): "text" as JSON with base64 bodies, as
// before binary frames and for hosts that do not read them, "binary" as
// AppendWebhooksFrame lays it out. Encoding appends to a buffer kept
// between frames, as the cloud does.
//
//	go test -run '^$' -bench WebhooksFrame -benchmem -benchtime 200x -count 3 ./shared/
func BenchmarkWebhooksFrame(b *testing.B) {
	hooks := mixHooks(b, 100)
	total := 0
	for _, w := range hooks {
		total += len(w.RawBody)
	}
	text, err := json.Marshal(Frame{Type: FrameWebhooks, Webhooks: hooks})
	require.NoError(b, err)
	bin, err := AppendWebhooksFrame(nil, hooks)
	require.NoError(b, err)
	b.Logf("%d bytes of bodies: text frame %d bytes, binary %d", total, len(text), len(bin))
	b.Run("encode/text", func(b *testing.B) {
		var buf bytes.Buffer
		b.SetBytes(int64(total))
		for range b.N {
			buf.Reset()
			require.NoError(b, json.NewEncoder(&buf).Encode(Frame{Type: FrameWebhooks, Webhooks: hooks}))
		}
	})
	b.Run("encode/binary", func(b *testing.B) {
		var buf []byte
		b.SetBytes(int64(total))
		for range b.N {
			buf, err = AppendWebhooksFrame(buf[:0], hooks)
			require.NoError(b, err)
		}
	})
	b.Run("decode/text", func(b *testing.B) {
		b.SetBytes(int64(total))
		for range b.N {
			var f Frame
			require.NoError(b, json.Unmarshal(text, &f))
		}
	})
	b.Run("decode/binary", func(b *testing.B) {
		b.SetBytes(int64(total))
		for range b.N {
			_, err := DecodeWebhooksFrame(bin, nil)
			require.NoError(b, err)
		}
	})
}

// ReadWebhooksFrame reads what DecodeWebhooksFrame decodes, from a stream:
// the same webhooks, bodies byte-exact, and the same refusals of a
// message that breaks the layout, with those a stream adds (cut short,
// running on, a length the transport said otherwise).
func TestReadWebhooksFrame(t *testing.T) {
	hooks := testHooks()
	msg, err := AppendWebhooksFrame(nil, hooks)
	require.NoError(t, err)
	for _, length := range []int64{-1, int64(len(msg))} {
		var buf bytes.Buffer
		got, err := ReadWebhooksFrame(bytes.NewReader(msg), length, len(msg), &buf, nil)
		require.NoError(t, err)
		want, err := DecodeWebhooksFrame(msg, nil)
		require.NoError(t, err)
		require.Equal(t, want, got)
		for i := range hooks {
			require.Equal(t, hooks[i].RawBody, got[i].RawBody, "body %d byte-exact", i)
		}
	}

	for name, c := range map[string]struct {
		msg    []byte
		length int64
		max    int
		want   string
	}{
		"short header":   {msg[:5], -1, len(msg), "shorter than its header"},
		"cut in JSON":    {msg[:WebhooksFrameHeader+3], -1, len(msg), "ends in its JSON"},
		"cut in bodies":  {msg[:len(msg)-1], -1, len(msg), "ends in its bodies"},
		"running on":     {append(bytes.Clone(msg), 'x'), -1, len(msg) + 1, "longer than its header says"},
		"length differs": {msg, int64(len(msg) + 1), len(msg) + 1, "declares"},
		"over the limit": {msg, -1, len(msg) - 1, "more than"},
		"malformed JSON": {binaryMessage(`{"type":"webhooks","webhooks":[`, "", 0), -1, 1 << 20, "malformed JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			_, err := ReadWebhooksFrame(bytes.NewReader(c.msg), c.length, c.max, &buf, nil)
			require.ErrorIs(t, err, ErrBadFrame)
			require.ErrorContains(t, err, c.want)
		})
	}

	// A read that fails is the reader's error, not a refusal.
	broken := errors.New("connection reset")
	_, err = ReadWebhooksFrame(io.MultiReader(bytes.NewReader(msg[:20]), errReader{broken}), -1, len(msg), new(bytes.Buffer), nil)
	require.ErrorIs(t, err, broken)
	require.NotErrorIs(t, err, ErrBadFrame)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
