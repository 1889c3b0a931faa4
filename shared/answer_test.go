package shared

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// answerJSON is the JSON encoding/json writes for r, with each webhook's
// raw_body replaced by raw_body_len: what a binary answer's JSON must be.
func answerJSON(t *testing.T, r *HeartbeatResponse) map[string]any {
	t.Helper()
	data, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	if ws, ok := m["webhooks"].([]any); ok {
		for i, w := range ws {
			w := w.(map[string]any)
			delete(w, "raw_body")
			w["raw_body_len"] = float64(len(r.Webhooks[i].RawBody))
		}
	}
	return m
}

func TestHeartbeatAnswerRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 27, 16, 0, 0, 42, time.UTC)
	cases := map[string]HeartbeatResponse{
		"all fields":                    {Status: "ok", HeartbeatIntervalS: 30, More: true, Webhooks: testHooks(), Now: now, LeaseS: 120, PollWhileBusy: true},
		"no webhooks":                   {Status: "ok", HeartbeatIntervalS: 30, Webhooks: []Webhook{}, Now: now, LeaseS: 120, PollWhileBusy: true},
		"null webhooks, omitted fields": {Status: "ok\"é\x00", Now: now.In(time.FixedZone("x", 3600))},
		"zero":                          {},
		"empty bodies": {Status: "ok", Webhooks: []Webhook{
			{DeliveryID: "a", Headers: map[string]string{}, RawBody: []byte{}, ReceivedAt: now},
			{DeliveryID: "b", RawBody: []byte{}, ReceivedAt: now}}, Now: now},
		"non-UTF-8 bodies": {Status: "ok", Webhooks: []Webhook{
			{DeliveryID: "a", RawBody: []byte{0xff, 0xfe, '\r', '\n', 0}, ReceivedAt: now},
			{DeliveryID: "b", RawBody: []byte("\xc3\x28 é"), ReceivedAt: now}}, Now: now},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			msg, err := AppendHeartbeatAnswer([]byte("kept"), &r)
			require.NoError(t, err)
			msg, part, _ := binaryAppended(t, msg)
			var m map[string]any
			require.NoError(t, json.Unmarshal(part, &m), "%s", part)
			require.Equal(t, answerJSON(t, &r), m, "the members and omissions of encoding/json")
			require.NotContains(t, string(part), `"raw_body"`)

			var got HeartbeatResponse
			require.NoError(t, DecodeHeartbeatAnswer(msg, &got, nil))
			// What the JSON answer decodes to is what the binary one does.
			text, err := json.Marshal(r)
			require.NoError(t, err)
			var want HeartbeatResponse
			require.NoError(t, json.Unmarshal(text, &want))
			require.Equal(t, want, got)
			for i := range r.Webhooks {
				require.Equal(t, r.Webhooks[i].RawBody, got.Webhooks[i].RawBody, "body %d byte-exact", i)
				require.NotNil(t, got.Webhooks[i].RawBody)
			}
		})
	}
}

func TestHeartbeatAnswerRefused(t *testing.T) {
	now := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	good, err := AppendHeartbeatAnswer(nil, &HeartbeatResponse{Status: "ok", Webhooks: testHooks()[:3], Now: now})
	require.NoError(t, err)
	part := binaryMessage
	cases := layoutRefusals(good)
	maps.Copy(cases, map[string]refusal{
		"malformed json":    {part(`{"status":"ok","webhooks":[`, "", 0), "malformed JSON"},
		"json not object":   {part(`[]`, "", 0), "malformed JSON"},
		"raw_body in json":  {part(`{"status":"ok","webhooks":[{"raw_body":"eHk=","raw_body_len":2}]}`, "xy", 2), "carries raw_body"},
		"no length":         {part(`{"status":"ok","webhooks":[{"delivery_id":"a"}]}`, "", 0), "has no raw_body_len"},
		"null webhook":      {part(`{"status":"ok","webhooks":[null]}`, "", 0), "has no raw_body_len"},
		"negative length":   {part(`{"webhooks":[{"raw_body_len":-1},{"raw_body_len":2}]}`, "x", 1), "out of range"},
		"length too large":  {part(`{"webhooks":[{"raw_body_len":3}]}`, "xy", 2), "out of range"},
		"lengths short":     {part(`{"webhooks":[{"raw_body_len":1}]}`, "xy", 2), "add up to 1"},
		"bodies, no hooks":  {part(`{"status":"ok","webhooks":[]}`, "xy", 2), "add up to 0"},
		"length not int":    {part(`{"webhooks":[{"raw_body_len":"1"}]}`, "x", 1), "malformed JSON"},
		"status not string": {part(`{"status":1,"webhooks":[]}`, "", 0), "malformed JSON"},
	})
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out := HeartbeatResponse{Status: "stale"}
			err := DecodeHeartbeatAnswer(c.msg, &out, nil)
			require.ErrorIs(t, err, ErrBadFrame)
			require.ErrorContains(t, err, c.want)
			require.Equal(t, HeartbeatResponse{}, out, "nothing of a refused answer is kept")
		})
	}

	_, err = AppendHeartbeatAnswer(nil, &HeartbeatResponse{Now: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.ErrorContains(t, err, "years 0–9999")
	_, err = AppendHeartbeatAnswer(nil, &HeartbeatResponse{Webhooks: []Webhook{{Body: json.RawMessage("{")}}})
	require.ErrorContains(t, err, "not JSON")
}

// FuzzDecodeHeartbeatAnswer: any message is decoded or refused with
// ErrBadFrame, never a panic; what decodes encodes again to the same
// answer, and the bodies are exactly the message's last bytes.
//
//	go test -run '^$' -fuzz FuzzDecodeHeartbeatAnswer -fuzztime 30s ./shared/
func FuzzDecodeHeartbeatAnswer(f *testing.F) {
	hooks := testHooks()
	now := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	for i := range hooks {
		m, err := AppendHeartbeatAnswer(nil, &HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 30, More: i%2 == 0,
			Webhooks: hooks[i:min(i+2, len(hooks))], Now: now, LeaseS: i, PollWhileBusy: i%2 == 1})
		require.NoError(f, err)
		if len(m) < 4<<10 {
			f.Add(m)
		}
	}
	empty, _ := AppendHeartbeatAnswer(nil, &HeartbeatResponse{})
	f.Add(empty)
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 1, '{', '}', 'x'})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var got HeartbeatResponse
		if err := DecodeHeartbeatAnswer(msg, &got, nil); err != nil {
			require.ErrorIs(t, err, ErrBadFrame)
			require.Equal(t, HeartbeatResponse{}, got)
			return
		}
		b := int(binary.BigEndian.Uint32(msg[4:]))
		var bodies []byte
		for _, w := range got.Webhooks {
			bodies = append(bodies, w.RawBody...)
		}
		require.True(t, bytes.Equal(msg[len(msg)-b:], bodies))
		if y := got.Now.Year(); y < 0 || y > 9999 {
			return // decodes, but encoding/json would not write it either
		}
		for _, w := range got.Webhooks {
			if y := w.ReceivedAt.Year(); y < 0 || y > 9999 {
				return
			}
		}
		again, err := AppendHeartbeatAnswer(nil, &got)
		require.NoError(t, err)
		var got2 HeartbeatResponse
		require.NoError(t, DecodeHeartbeatAnswer(again, &got2, nil))
		require.Equal(t, len(got.Webhooks), len(got2.Webhooks))
		require.Equal(t, got.Status, got2.Status)
		require.Equal(t, got.More, got2.More)
		require.Equal(t, got.LeaseS, got2.LeaseS)
		require.True(t, got.Now.Equal(got2.Now))
		for i := range got.Webhooks {
			require.True(t, bytes.Equal(got.Webhooks[i].RawBody, got2.Webhooks[i].RawBody))
			require.Equal(t, got.Webhooks[i].DeliveryID, got2.Webhooks[i].DeliveryID)
		}
	})
}
